"""KernelSVC (ALFPGM, SMO) against scikit-learn's SVC and oneDAL's SVC in one run.

Same data, C, gamma (../shared/data/SETTINGS.md; pendigits and shuttle by cross-validation, see
benchmarks/_data.py), tol=1e-3 and cache_size=200 MB for every solver. Per data set: fit time,
ratios to SVC and to oneDAL, dual objective, number of SVs, test accuracy, iterations and kernel
values computed, for KernelSVC's defaults, ALFPGM and SMO with and without shrinking, and on one
thread. The solvers alternate within each round; fits under 10 s are repeated and the median of 3
reported. Also: a sweep of the number of pairs p (paper 003, figures 2-4), 1 vs all threads on
a9a, and kernel-row throughput against the machine's FMA peak. oneDAL's SVC
(scikit-learn-intelex) is added when it is installed: install it in the benchmark environment,
not as a dependency of the package (``pip install scikit-learn-intelex``).

    python benchmarks/alfpgm.py --out docs/alfpgm.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
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

DATASETS = ["phishing", "a9a", "w8a", "ijcnn1", "cod-rna", "pendigits", "shuttle"]
# Training rows kept (random subsample, seed 0); None keeps the whole training split.
DEFAULT_CAPS: Dict[str, Optional[int]] = {name: None for name in DATASETS}
DENSE = {"ijcnn1", "cod-rna", "pendigits", "shuttle"}  # low-dimensional: dense arrays for all
KINDS = ["svc", "onedal", "alfpgm", "alfpgm_noshrink", "alfpgm1", "smo", "smo_noshrink"]
LABELS = {
    "svc": "sklearn SVC",
    "onedal": "oneDAL SVC",
    "alfpgm": "KernelSVC (defaults: ALFPGM)",
    "alfpgm_noshrink": "ALFPGM, shrinking=False",
    "alfpgm1": "ALFPGM, 1 thread",
    "smo": "KernelSVC SMO",
    "smo_noshrink": "SMO, shrinking=False",
}
REPEAT_BELOW = 10.0  # seconds: fits shorter than this are run 3 times (median reported)


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(
            (ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln), "?"
        )
    except (OSError, subprocess.CalledProcessError):
        model = platform.processor() or "?"
    return f"{model}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.machine()}"


NOTE = (
    "All solvers: tol = 1e-3 (m(a) - M(a) < tol), cache_size = 200 MB, C and gamma from "
    "SETTINGS.md. scikit-learn's SVC (LIBSVM) runs on one thread; KernelSVC on every core unless "
    "marked 1 thread; oneDAL uses every core. Dual objective (binary sets): D(a) = sum a - 1/2 "
    "a^T Q a (higher is better), computed the same way for every solver from its dual_coef_ and "
    "support vectors; for the multi-class sets the accuracies are compared. Kernel rows: kernel "
    "values computed / training rows (shrinking computes row prefixes). Times: wall-clock seconds "
    "of a fit; the solvers alternate within a round; fits under 10 s are run 3 times and the "
    "median is reported."
)


def load_average() -> str:
    try:
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


def make(kind: str, C: float, gamma: float, **kw: Any) -> Any:
    if kind == "svc":
        return SVC(C=C, gamma=gamma, tol=1e-3, cache_size=200)
    if kind == "onedal":
        from sklearnex.svm import SVC as SVCX  # type: ignore[import-not-found]

        return SVCX(C=C, gamma=gamma, tol=1e-3, cache_size=200)
    options = {"n_pairs": kw.pop("n_pairs")} if "n_pairs" in kw else None
    if kind == "alfpgm1":
        kw["n_jobs"] = 1
    if kind.endswith("_noshrink"):
        kw["shrinking"] = False
    solver = "smo" if kind.startswith("smo") else "alfpgm"
    if solver == "smo":
        options = None
    return KernelSVC(
        C=C, gamma=gamma, tol=1e-3, cache_size=200, solver=solver, solver_options=options, **kw
    )


def run_fit(kind: str, X, y, Xt, yt, C: float, gamma: float, **kw: Any) -> Dict[str, Any]:
    clf = make(kind, C, gamma, **kw)
    t0 = time.perf_counter()
    clf.fit(X, y)
    seconds = time.perf_counter() - t0
    n_iter = getattr(clf, "n_iter_", None)
    binary = len(clf.classes_) == 2
    out = dict(
        seconds=seconds,
        dual=dual_objective(clf.dual_coef_, clf.support_vectors_, gamma) if binary else None,
        n_sv=int(clf.support_vectors_.shape[0]),
        accuracy=float(np.mean(clf.predict(Xt) == yt)),
        iterations=int(np.sum(n_iter)) if n_iter is not None else -1,
        kernel_rows=None,
    )
    if isinstance(clf, KernelSVC):
        out["stats"] = clf.fit_stats_
        out["kernel_rows"] = clf.fit_stats_["kernel_values"] / X.shape[0]
    return out


def kernel_row_scaling(X, gamma: float, n_rows: int, repeats: int) -> Dict[int, float]:
    """Seconds to compute n_rows kernel rows (one parallel batch of the cache), per thread count."""
    native = to_native(X)
    idx = np.random.default_rng(1).choice(X.shape[0], size=n_rows, replace=False).astype(np.int64)
    saved = budgetsvm.get_num_threads()
    times = {}
    try:
        for threads in sorted({1, os.cpu_count() or 1}):
            budgetsvm.set_num_threads(threads)
            best = float("inf")
            for _ in range(repeats):
                _, seconds = _budgetsvm.kernel_rows(native, gamma, idx)
                best = min(best, seconds)
            times[threads] = best
    finally:
        budgetsvm.set_num_threads(saved)
    return times


def fma_peak_per_second(cores: int) -> float:
    """Nominal FMA peak: cores x 2 FMA units x f64 lanes (8 with AVX-512, 4 with AVX2) x clock."""
    mhz = 0.0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                mhz = max(mhz, float(line.split(":")[1]))
    except OSError:
        pass
    lanes = 8 if budgetsvm.simd_level().startswith("avx512") else 4
    return cores * 2 * lanes * mhz * 1e6


def fmt(v: Optional[float], digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", default=DATASETS)
    ap.add_argument("--kinds", nargs="*", default=KINDS, help=f"solvers among {KINDS}")
    ap.add_argument("--pairs", nargs="*", type=int, default=[25, 50, 100, 200])
    ap.add_argument(
        "--sweep-datasets",
        nargs="*",
        default=["phishing", "a9a", "ijcnn1"],
        help="data sets of the p sweep",
    )
    ap.add_argument("--sweep-cap", type=int, default=20000, help="training rows in the p sweep")
    ap.add_argument("--cap", action="append", default=[], help="NAME=ROWS training subsample")
    ap.add_argument("--rounds", type=int, default=3, help="runs of fits under 10 s (median)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    caps = dict(DEFAULT_CAPS)
    for item in args.cap:
        name, rows = item.split("=")
        caps[name] = None if rows in ("all", "none") else int(rows)
    try:
        from importlib.metadata import version

        import sklearnex  # type: ignore[import-not-found]  # noqa: F401

        onedal = f"scikit-learn-intelex {version('scikit-learn-intelex')}"
    except ImportError:
        onedal = None
    kinds = [k for k in args.kinds if k != "onedal" or onedal]
    started = time.perf_counter()
    lines: List[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say("# KernelSVC (ALFPGM, SMO) vs scikit-learn's SVC and oneDAL's SVC")
    say()
    say(f"Command: `python {' '.join(sys.argv)}`  ")
    say(f"Machine: {machine()}; budgetsvm SIMD path {budgetsvm.simd_level()}  ")
    say(f"Load average at the start (1, 5, 15 min): {load_average()}  ")
    say(
        f"Date {datetime.date.today()}, Python {platform.python_version()}, scikit-learn "
        f"{sklearn.__version__}, budgetsvm {budgetsvm.__version__}, threads "
        f"{budgetsvm.get_num_threads()}; {onedal or 'scikit-learn-intelex not installed'}  "
    )
    say(NOTE)
    say()

    # --- main table --------------------------------------------------------------------------
    say("## Training time and solution quality")
    say()
    say(
        "| data set | train rows | solver | time (s) | / SVC | / oneDAL | dual objective | SVs "
        "| test accuracy | iterations | kernel rows |"
    )
    say("|---|---|---|---|---|---|---|---|---|---|---|")
    results: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for name in args.datasets:
        s = SETTINGS[name]
        X, y, Xt, yt, n_full = prepare(name, caps.get(name))
        first: Dict[str, Dict[str, Any]] = {}
        times: Dict[str, List[float]] = {k: [] for k in kinds}
        for round_ in range(args.rounds):
            # Alternate: each round in a rotated order, only the fits under 10 s after round 1.
            order = kinds[round_ % len(kinds) :] + kinds[: round_ % len(kinds)]
            for kind in order:
                if round_ > 0 and first[kind]["seconds"] >= REPEAT_BELOW:
                    continue
                r = run_fit(kind, X, y, Xt, yt, s["C"], s["gamma"])
                first.setdefault(kind, r)
                times[kind].append(r["seconds"])
        for kind in kinds:
            first[kind]["median"] = statistics.median(times[kind])
            first[kind]["runs"] = len(times[kind])
        results[name] = first
        for kind in kinds:
            r = first[kind]
            t = r["median"]
            ratio_svc = t / first["svc"]["median"] if "svc" in first else None
            ratio_dal = t / first["onedal"]["median"] if "onedal" in first else None
            dual = f"{r['dual']:.4f}" if r["dual"] is not None else "-"
            say(
                f"| {name} | {X.shape[0]} ({n_full}) | {LABELS[kind]} | {fmt(t)} | {fmt(ratio_svc)} "
                f"| {fmt(ratio_dal)} | {dual} | {r['n_sv']} | {100 * r['accuracy']:.2f}% "
                f"| {r['iterations']} | {fmt(r['kernel_rows'], 0)} |"
            )
    say()
    if "onedal" in kinds and "alfpgm" in kinds:
        say("### KernelSVC's defaults against oneDAL")
        say()
        say("| data set | KernelSVC (s) | oneDAL (s) | ratio | dual, relative to oneDAL's |")
        say("|---|---|---|---|---|")
        for name, r in results.items():
            a, o = r["alfpgm"], r["onedal"]
            rel = (
                f"{(a['dual'] - o['dual']) / abs(o['dual']):+.1e}" if a["dual"] is not None else "-"
            )
            say(
                f"| {name} | {fmt(a['median'])} | {fmt(o['median'])} | "
                f"{fmt(a['median'] / o['median'])} | {rel} |"
            )
        say()

    # --- threads -------------------------------------------------------------------------------
    cores = os.cpu_count() or 1
    say(f"## Threads: 1 vs {cores}")
    say()
    X, y, Xt, yt, _ = prepare("a9a", None)
    s = SETTINGS["a9a"]
    rows = kernel_row_scaling(X, s["gamma"], 400, 3)
    say(
        f"Kernel rows (a9a, {X.shape[0]} rows, CSR; 400 rows of length {X.shape[0]} in one batch, "
        f"best of 3): 1 thread {fmt(rows[1], 3)} s, {cores} threads {fmt(rows[cores], 3)} s, "
        f"speed-up {fmt(rows[1] / rows[cores])}x.  "
    )
    fits: Dict[int, List[float]] = {1: [], cores: []}
    for _ in range(3):
        for threads in sorted(fits):
            fits[threads].append(
                run_fit("alfpgm", X, y, Xt, yt, s["C"], s["gamma"], n_jobs=threads)["seconds"]
            )
    t1, tn = statistics.median(fits[1]), statistics.median(fits[cores])
    say(
        f"Whole KernelSVC fit (a9a, all {X.shape[0]} rows, defaults, median of 3 alternated): "
        f"1 thread {fmt(t1)} s, {cores} threads {fmt(tn)} s, speed-up {fmt(t1 / tn)}x."
    )
    say()

    # --- kernel rows against the FMA peak --------------------------------------------------------
    say("## Kernel-row throughput against the FMA peak")
    say()
    peak = fma_peak_per_second(cores)
    say(
        f"Peak: {cores} cores x 2 FMA units x "
        f"{8 if budgetsvm.simd_level().startswith('avx512') else 4} "
        f"f64 lanes x the clock in /proc/cpuinfo = {peak / 1e9:.1f} G FMA/s. A kernel value of "
        "row x_i costs nnz(x_i) multiply-adds (the feature-major axpys; dense rows, blocked 8 at a "
        "time, all d; the column scatter of sparse data does fewer, the shared non-zeros) and one "
        "exponential. 1000 rows in one batch "
        "(best of 3), all threads; each batch fills fresh row storage (first-touch page faults "
        "included, as in the first fill of a fit's cache)."
    )
    say()
    say("| data set | path | rows x length | seconds | G kernel values/s | G FMA/s | of peak |")
    say("|---|---|---|---|---|---|---|")
    for name in ("ijcnn1", "a9a", "w8a", "cod-rna"):
        s = SETTINGS[name]
        X, _, _, _, _ = prepare(name, None)
        native = to_native(X)
        idx = np.random.default_rng(2).choice(X.shape[0], size=1000, replace=False)
        best = min(
            _budgetsvm.kernel_rows(native, s["gamma"], idx.astype(np.int64))[1] for _ in range(3)
        )
        nnz = float(np.diff(X.indptr)[idx].mean()) if sp.issparse(X) else float(X.shape[1])
        values = 1000 * X.shape[0]
        if not sp.issparse(X):
            path = "feature-major, 8 rows register-blocked"
        else:
            path = "column scatter" if X.shape[1] > 128 else "feature-major axpy"
        say(
            f"| {name} | {path} | 1000 x {X.shape[0]} | {best:.3f} | {values / best / 1e9:.2f} | "
            f"{values * nnz / best / 1e9:.2f} | {100 * values * nnz / best / peak:.0f}% |"
        )
    say()

    # --- p sweep ---------------------------------------------------------------------------------
    sweep: Dict[str, Dict[int, Dict[str, Any]]] = {}
    if args.pairs and args.sweep_datasets:
        say("## Sweep of the number of pairs p (paper 003, figures 2-4)")
        say()
        say(
            f"Training subsample of at most {args.sweep_cap} rows (seed 0); single fits. Inner "
            "iterations: steps of the working sets' subproblem solver (SMO by default)."
        )
        say()
        say(
            "| data set | n | p | time (s) | working sets | inner iterations | SMO fallbacks "
            "| kernel rows | dual objective |"
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
                    f"| {name} | {X.shape[0]} | {p} | {fmt(r['seconds'])} | {st['working_sets']} | "
                    f"{st['inner_iterations']} | {st['fallback_steps']} | {fmt(r['kernel_rows'], 0)} "
                    f"| {r['dual']:.4f} |"
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
