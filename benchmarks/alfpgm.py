"""ALFPGM (budgetsvm.KernelSVC) against scikit-learn's SVC (LIBSVM SMO) in one run.

Same data, C, gamma (../shared/data/SETTINGS.md), tol=1e-3 and cache_size=200 MB for every
solver. Per data set: training time, ratio to SVC, dual objective, number of SVs, test accuracy
and iterations of each solver; a sweep of the number of pairs p (paper 003, figures 2-4); the
1- vs 2-thread time of kernel-row computation and of a whole fit. scikit-learn-intelex's SVC is
added when it is installed. Writes a Markdown report (and the p-sweep plot next to it).

    python benchmarks/alfpgm.py --out docs/alfpgm.md
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import budgetsvm
import numpy as np
import scipy.sparse as sp
import sklearn
from _data import SETTINGS, load
from budgetsvm import KernelSVC, _budgetsvm
from budgetsvm._validation import to_native
from sklearn.svm import SVC

DATASETS = ["a9a", "w8a", "ijcnn1", "cod-rna", "phishing"]
# Training rows kept (random subsample, seed 0) so that SVC finishes in a couple of minutes;
# None keeps the whole training split (SVC needs under a minute on each on a 2-core machine).
DEFAULT_CAPS: Dict[str, Optional[int]] = {name: None for name in DATASETS}
DENSE = {"ijcnn1", "cod-rna"}  # low-dimensional: both solvers get a dense array


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(
            (ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln), "?"
        )
    except (OSError, subprocess.CalledProcessError):
        model = platform.processor() or "?"
    import os

    return f"{model}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.machine()}"


NOTE = (
    "All solvers: tol = 1e-3 (m(a) - M(a) < tol), cache_size = 200 MB, C and gamma from "
    "SETTINGS.md. scikit-learn's SVC (LIBSVM) runs on one thread; ALFPGM and budgetsvm's SMO on "
    "the threads above unless marked 1 thread; scikit-learn-intelex uses every core. Dual "
    "objective: D(a) = sum a - 1/2 a^T Q a (higher is better), computed the same way for every "
    "solver from its dual_coef_ and support vectors. Times: wall-clock seconds of one fit, single "
    "runs, on a machine shared with other jobs."
)


def load_average() -> str:
    try:
        import os

        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def dual_objective(dual_coef: Any, sv: Any, gamma: float) -> float:
    """Binary D(a) = sum |y a| - 1/2 (y a)^T K (y a) over the support vectors, in O(n_SV) memory."""
    coef = dual_coef.toarray() if sp.issparse(dual_coef) else np.asarray(dual_coef)
    coef = np.ascontiguousarray(coef.reshape(-1, 1))
    sv = sv.toarray() if sp.issparse(sv) else np.ascontiguousarray(sv, dtype=np.float64)
    if sv.shape[0] == 0:
        return 0.0
    f = _budgetsvm.decision_function(sv, coef, gamma, sv)[:, 0]
    return float(np.abs(coef).sum() - 0.5 * coef[:, 0] @ f)


def prepare(name: str, cap: Optional[int]):
    X, y, Xt, yt = load(name)
    n_full = X.shape[0]
    if cap is not None and X.shape[0] > cap:
        keep = np.sort(np.random.default_rng(0).permutation(X.shape[0])[:cap])
        X, y = X[keep], y[keep]
    if name in DENSE:
        X = X.toarray() if sp.issparse(X) else np.asarray(X)
        Xt = Xt.toarray() if sp.issparse(Xt) else np.asarray(Xt)
    else:
        X, Xt = sp.csr_matrix(X), sp.csr_matrix(Xt)
    return X, y, Xt, yt, n_full


def run_fit(kind: str, X, y, Xt, yt, C: float, gamma: float, **kw: Any) -> Dict[str, Any]:
    if kind == "svc":
        clf = SVC(C=C, gamma=gamma, tol=1e-3, cache_size=200)
    elif kind == "sklearnex":
        from sklearnex.svm import SVC as SVCX  # type: ignore[import-not-found]

        clf = SVCX(C=C, gamma=gamma, tol=1e-3, cache_size=200)
    else:
        # ALFPGM's n_pairs goes into solver_options; n_jobs stays a constructor argument.
        options = {"n_pairs": kw.pop("n_pairs")} if "n_pairs" in kw else None
        if kind == "alfpgm1":
            kw["n_jobs"] = 1
        solver = "smo" if kind == "smo" else "alfpgm"
        clf = KernelSVC(
            C=C, gamma=gamma, tol=1e-3, cache_size=200, solver=solver, solver_options=options, **kw
        )
    t0 = time.perf_counter()
    clf.fit(X, y)
    seconds = time.perf_counter() - t0
    n_iter = getattr(clf, "n_iter_", None)
    out = dict(
        seconds=seconds,
        dual=dual_objective(clf.dual_coef_, clf.support_vectors_, gamma),
        n_sv=int(clf.support_vectors_.shape[0]),
        accuracy=float(np.mean(clf.predict(Xt) == yt)),
        iterations=int(np.sum(n_iter)) if n_iter is not None else -1,
    )
    if kind in ("alfpgm", "alfpgm1", "smo"):
        out["stats"] = clf.fit_stats_
    return out


def kernel_row_scaling(X, gamma: float, n_rows: int, repeats: int) -> Dict[int, float]:
    """Seconds to compute n_rows kernel rows (one parallel batch of the cache), per thread count."""
    native = to_native(X)
    idx = np.random.default_rng(1).choice(X.shape[0], size=n_rows, replace=False).astype(np.int64)
    saved = budgetsvm.get_num_threads()
    times = {}
    try:
        for threads in (1, 2):
            budgetsvm.set_num_threads(threads)
            best = float("inf")
            for _ in range(repeats):
                _, seconds = _budgetsvm.kernel_rows(native, gamma, idx)
                best = min(best, seconds)
            times[threads] = best
    finally:
        budgetsvm.set_num_threads(saved)
    return times


def fmt(v: float, digits: int = 2) -> str:
    return f"{v:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", default=DATASETS)
    ap.add_argument("--pairs", nargs="*", type=int, default=[10, 25, 50, 100, 200])
    ap.add_argument(
        "--sweep-datasets",
        nargs="*",
        default=["phishing", "a9a", "ijcnn1"],
        help="data sets of the p sweep",
    )
    ap.add_argument("--sweep-cap", type=int, default=20000, help="training rows in the p sweep")
    ap.add_argument("--cap", action="append", default=[], help="NAME=ROWS training subsample")
    ap.add_argument(
        "--best-p", type=int, default=None, help="p of the main table (default: best of the sweep)"
    )
    ap.add_argument("--smo", action="store_true", help="also time budgetsvm's own SMO")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    caps = dict(DEFAULT_CAPS)
    for item in args.cap:
        name, rows = item.split("=")
        caps[name] = None if rows in ("all", "none") else int(rows)
    try:
        import sklearnex  # type: ignore[import-not-found]  # noqa: F401

        have_sklearnex = True
    except ImportError:
        have_sklearnex = False
    started = time.perf_counter()
    lines: List[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say("# ALFPGM (KernelSVC) vs scikit-learn SVC")
    say()
    say(f"Command: `python {' '.join(sys.argv)}`  ")
    say(f"Machine: {machine()}; budgetsvm SIMD path {budgetsvm.simd_level()}  ")
    say(
        f"Load average at the start (1, 5, 15 min): {load_average()} (other jobs share this machine)  "
    )
    say(
        f"Date {datetime.date.today()}, Python {platform.python_version()}, scikit-learn "
        f"{sklearn.__version__}, budgetsvm {budgetsvm.__version__}, threads "
        f"{budgetsvm.get_num_threads()}; scikit-learn-intelex "
        f"{'installed' if have_sklearnex else 'not installed'}  "
    )
    say(NOTE)
    say()

    # --- p sweep ---------------------------------------------------------------------------
    sweep: Dict[str, Dict[int, Dict[str, Any]]] = {}
    if args.pairs and args.sweep_datasets:
        say("## Sweep of the number of pairs p (paper 003, figures 2-4)")
        say()
        say(f"Training subsample of at most {args.sweep_cap} rows (seed 0).")
        say()
        say(
            "| data set | n | p | time (s) | working sets | FISTA iterations | SMO fallbacks | kernel rows computed | dual objective |"
        )
        say("|---|---|---|---|---|---|---|---|---|")
        for name in args.sweep_datasets:
            s = SETTINGS[name]
            X, y, Xt, yt, _ = prepare(name, args.sweep_cap)
            sweep[name] = {}
            for p in args.pairs:
                r = run_fit("alfpgm", X, y, Xt, yt, s["C"], s["gamma"], n_pairs=p)
                sweep[name][p] = r
                st = r["stats"]
                say(
                    f"| {name} | {X.shape[0]} | {p} | {fmt(r['seconds'])} | {r['iterations']} | "
                    f"{st['inner_iterations']} | {st['fallback_steps']} | {st['cache_misses']} | "
                    f"{r['dual']:.4f} |"
                )
        say()
    best_p = args.best_p
    if best_p is None:
        if sweep:
            totals = {p: sum(sweep[d][p]["seconds"] for d in sweep) for p in args.pairs}
            best_p = min(totals, key=totals.get)
        else:
            best_p = 50
    say(
        f"p used below: {best_p} ({'best total time in the sweep' if args.best_p is None and sweep else 'given'})."
    )
    say()

    # --- main table --------------------------------------------------------------------------
    say("## Training time and solution quality")
    say()
    kinds = (
        ["svc"]
        + (["sklearnex"] if have_sklearnex else [])
        + ["alfpgm", "alfpgm1"]
        + (["smo"] if args.smo else [])
    )
    say(
        "| data set | train rows (of) | solver | time (s) | ratio to SVC | dual objective | SVs | test accuracy | iterations |"
    )
    say("|---|---|---|---|---|---|---|---|---|")
    results: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for name in args.datasets:
        s = SETTINGS[name]
        X, y, Xt, yt, n_full = prepare(name, caps.get(name))
        results[name] = {}
        for kind in kinds:
            kw = {"n_pairs": best_p} if kind in ("alfpgm", "alfpgm1") else {}
            r = run_fit(kind, X, y, Xt, yt, s["C"], s["gamma"], **kw)
            results[name][kind] = r
            ratio = r["seconds"] / results[name]["svc"]["seconds"]
            label = {
                "svc": "sklearn SVC",
                "sklearnex": "sklearnex SVC",
                "alfpgm": f"ALFPGM p={best_p}",
                "alfpgm1": f"ALFPGM p={best_p}, 1 thread",
                "smo": "budgetsvm SMO",
            }[kind]
            say(
                f"| {name} | {X.shape[0]} ({n_full}) | {label} | {fmt(r['seconds'])} | {fmt(ratio)} | "
                f"{r['dual']:.4f} | {r['n_sv']} | {100 * r['accuracy']:.2f}% | {r['iterations']} |"
            )
    say()

    # --- threads -------------------------------------------------------------------------------
    say("## Threads: 1 vs 2")
    say()
    X, y, Xt, yt, _ = prepare("a9a", None)
    s = SETTINGS["a9a"]
    rows = kernel_row_scaling(X, s["gamma"], 400, 3)
    say(
        f"Kernel rows (a9a, {X.shape[0]} rows, CSR; 400 rows of length {X.shape[0]} in one batch, "
        f"best of 3): 1 thread {fmt(rows[1], 3)} s, 2 threads {fmt(rows[2], 3)} s, "
        f"speed-up {fmt(rows[1] / rows[2])}x.  "
    )
    Xs, ys, Xts, yts, _ = prepare("a9a", 10000)
    fits = {}
    for threads in (1, 2):
        fits[threads] = run_fit(
            "alfpgm", Xs, ys, Xts, yts, s["C"], s["gamma"], n_pairs=best_p, n_jobs=threads
        )["seconds"]
    say(
        f"Whole ALFPGM fit (a9a, 10000 rows, p={best_p}): 1 thread {fmt(fits[1])} s, 2 threads "
        f"{fmt(fits[2])} s, speed-up {fmt(fits[1] / fits[2])}x."
    )
    say()
    say(f"Total benchmark time {fmt(time.perf_counter() - started, 0)} s.  ")
    say(f"Load average at the end (1, 5, 15 min): {load_average()}.")
    say()
    say("Method choices and the discussion of these results: `alfpgm_notes.md`.")

    if sweep:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(5, 3.5))
            for name, by_p in sweep.items():
                ax.plot(list(by_p), [by_p[p]["seconds"] for p in by_p], marker="o", label=name)
            ax.set_xlabel("pairs per working set p")
            ax.set_ylabel("training time (s)")
            ax.set_xscale("log")
            ax.legend()
            ax.set_title("ALFPGM: time vs p")
            fig.tight_layout()
            if args.out is not None:
                png = args.out.with_name(args.out.stem + "_pairs.png")
                fig.savefig(png, dpi=120)
                lines.insert(
                    lines.index("## Sweep of the number of pairs p (paper 003, figures 2-4)") + 1,
                    f"\n![time vs p]({png.name})",
                )
        except ImportError:
            pass
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
