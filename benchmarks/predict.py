"""Prediction throughput against oneDAL, scikit-learn's SVC and the numpy baseline, with the floor.

For each data set (SETTINGS.md's C, gamma and splits), in one process:

- the exact SVM: ``KernelSVC``, oneDAL's ``SVC`` (scikit-learn-intelex, when installed) and
  scikit-learn's ``SVC`` fitted with the same C and gamma; each predicts the test rows;
- the budgeted model: ``BudgetSVC(budget=500)`` (polished) against the three-line numpy
  baseline ``rbf_kernel(X, S) @ dual_coef_.T + intercept_`` on the same support vectors.

Times are the best of 3, the methods alternated within each round. Throughput is kernel values
per second (test rows x support vectors / seconds). The floor is the arithmetic of those kernel
values at this machine's peak: per kernel value, one multiply-add per non-zero of the test row
(the dot product), about 20 for the exponential and one per output for the decision sum, at
16 double-precision multiply-adds per cycle and core (two AVX-512 FMA units) on all cores at the
nominal clock. No method can beat it; memory traffic and the sparse rows' scattered columns keep
every method above it.

    python benchmarks/predict.py --out docs/predict.md        # about 6 minutes with SVC
    pip install scikit-learn-intelex                          # for the oneDAL column
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import SETTINGS, load  # noqa: E402
from _report import arguments, commit, machine, publish  # noqa: E402

SETS = ["a9a", "ijcnn1", "w8a", "phishing", "cod-rna", "pendigits", "shuttle"]
EXP_FMAS = 20


def clock_ghz() -> float:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000
    except OSError:
        pass
    return 2.5


def best_of(fns, rounds: int = 3):
    times = [[] for _ in fns]
    out = [None] * len(fns)
    for _ in range(rounds):
        for i, f in enumerate(fns):
            start = time.perf_counter()
            out[i] = f()
            times[i].append(time.perf_counter() - start)
    return [min(t) for t in times], out


def floor_seconds(Xt, n_sv: int, n_out: int) -> float:
    nnz = Xt.nnz if sp.issparse(Xt) else np.count_nonzero(Xt)
    fmas = n_sv * (nnz + Xt.shape[0] * (EXP_FMAS + n_out))
    peak = 16 * clock_ghz() * 1e9 * (os.cpu_count() or 1)
    return fmas / peak


def main() -> None:
    ap = arguments(__doc__, "--sets", SETS)
    ap.add_argument("--no-svc", action="store_true", help="leave out scikit-learn's SVC (slow to fit)")
    args = ap.parse_args()
    import budgetsvm
    from budgetsvm import BudgetSVC, KernelSVC
    from sklearn.metrics.pairwise import rbf_kernel
    from sklearn.svm import SVC

    try:
        from sklearnex.svm import SVC as OneDalSVC  # type: ignore[import-not-found]
    except ImportError:
        OneDalSVC = None
    exact_rows, budget_rows = [], []
    for name in args.sets:
        X, y, Xt, yt = load(name)
        s = SETTINGS[name]
        C, gamma = s["C"], s["gamma"]
        models = {"budgetsvm KernelSVC": KernelSVC(C=C, gamma=gamma).fit(X, y)}
        if OneDalSVC is not None:
            models["oneDAL SVC"] = OneDalSVC(C=C, gamma=gamma).fit(X, y)
        if not args.no_svc:
            models["scikit-learn SVC"] = SVC(C=C, gamma=gamma).fit(X, y)
        names = list(models)
        times, preds = best_of([lambda m=m, Xt=Xt: m.predict(Xt) for m in models.values()])
        ours = models["budgetsvm KernelSVC"]
        n_sv = ours.support_vectors_.shape[0]
        n_out = len(ours.classes_) - 1
        floor = floor_seconds(Xt, n_sv, n_out)
        ref = times[names.index("oneDAL SVC")] if "oneDAL SVC" in names else None
        for method, t, p in zip(names, times, preds):
            values = Xt.shape[0] * models[method].support_vectors_.shape[0]
            exact_rows.append(
                f"| {name} | {method} | {models[method].support_vectors_.shape[0]:,} | "
                f"{100 * np.mean(p == yt):.2f} | {t:.4f} | {values / t / 1e9:.3f} | "
                f"{'' if ref is None else f'{t / ref:.2f}'} | {floor:.4f} |"
            )
            print(exact_rows[-1], flush=True)
        budget = BudgetSVC(C=C, gamma=gamma, budget=500, epochs=5, random_state=0).fit(X, y)
        S, coef, b = budget.support_vectors_, budget.dual_coef_.T, budget.intercept_
        (t_ours, t_np), (p_ours, dec) = best_of(
            [
                lambda budget=budget, Xt=Xt: budget.predict(Xt),
                lambda Xt=Xt, S=S, g=gamma, coef=coef, b=b: rbf_kernel(Xt, S, gamma=g) @ coef + b,
            ]
        )
        dec = dec[:, 0] if dec.shape[1] == 1 else dec
        p_np = budget.classes_[(dec > 0).astype(int)] if dec.ndim == 1 else budget.classes_[dec.argmax(1)]
        values = Xt.shape[0] * S.shape[0]
        floor = floor_seconds(Xt, S.shape[0], coef.shape[1])
        for method, t, p in [("BudgetSVC.predict", t_ours, p_ours), ("rbf_kernel(X, S) @ coef", t_np, p_np)]:
            budget_rows.append(
                f"| {name} | {method} | {S.shape[0]} | {100 * np.mean(p == yt):.2f} | {t:.4f} | "
                f"{values / t / 1e9:.3f} | {t / t_np:.2f} | {floor:.4f} |"
            )
            print(budget_rows[-1], flush=True)
    header = "| data | method | SVs | accuracy % | predict s | G kernel values/s | {} | floor s |\n|---|---|---|---|---|---|---|---|"
    lines = [
        "# Prediction throughput",
        "",
        f"Command: `python benchmarks/predict.py {' '.join(sys.argv[1:])}`; commit {commit()}; "
        f"{machine()} at {clock_ghz():.2f} GHz nominal; budgetsvm threads {budgetsvm.get_num_threads()} "
        f"(SIMD {budgetsvm.simd_level()}); {time.strftime('%Y-%m-%d')}.",
        "",
        "Best of 3, methods alternated. The floor: one multiply-add per non-zero of a test row, "
        f"{EXP_FMAS} for the exponential and one per output for each kernel value, at 16 "
        "multiply-adds per cycle and core on every core (see the script's doc).",
        "",
        "## Exact SVMs (each fitted with the same C and gamma)",
        "",
        header.format("/ oneDAL"),
        *exact_rows,
        "",
        "## Budgeted model (B = 500, polished) against the numpy baseline on its support vectors",
        "",
        header.format("/ baseline"),
        *budget_rows,
    ]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
