"""Kernel rows in f64 where f32 cannot hold the problem, and strides (issue 60, item 11).

Part ``example``: scikit-learn's polynomial SVR example (40 points in [0, 5], the kernel
(x x' + 1)^3 up to 1.76e4, C = 100, epsilon 0.1) with both solvers at tol 1e-3 and 1e-5, the
rows' type chosen by the fit ('auto') and forced to float32 (LIBSVM's): steps, strides, and the
float64 certificate from the model alone: the primal 1/2 w^T w + C sum max(0, |f - y| - eps)
of its predictions with w = Phi^T beta in the explicit feature map phi(x) = (1, sqrt(3) x,
sqrt(3) x^2, x^3), the dual y^T beta - eps |beta|_1 - 1/2 beta^T K beta of its coefficients,
their gap relative to the primal, and the largest distance of its predictions from the
optimum's (an interior-point solver on the primal, gaps 1e-13: primal 450.176453507597).

Part ``gaussian``: Gaussian fits at SETTINGS.md's C and gamma (KernelSVC on a9a, ijcnn1,
cod-rna, pendigits; KernelSVR on puma8nh), each solver, in a child process per fit, alternating
``--before`` (the python of the previous build) and this one over ``--rounds``: the median fit
seconds of each build and whether every fit gave the same decision values bit for bit.

    python benchmarks/row_precision.py --parts example gaussian --before /tmp/before/bin/python \\
        --out docs/row_precision.md
"""

from __future__ import annotations

import hashlib
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import arguments, header, publish  # noqa: E402

OPTIMUM = 450.17645350759716
W_OPT = (1.060866865351756, -0.5047928896334243, 0.09523253704509238)
B_OPT = -0.1204303006187434
GAUSSIAN = [
    ("a9a", "alfpgm"),
    ("a9a", "smo"),
    ("ijcnn1", "alfpgm"),
    ("ijcnn1", "smo"),
    ("cod-rna", "alfpgm"),
    ("pendigits", "alfpgm"),
    ("pendigits", "smo"),
    ("puma8nh", "alfpgm"),
    ("puma8nh", "smo"),
]


def example_part() -> list:
    from budgetsvm import KernelSVR

    rng = np.random.RandomState(0)
    X = np.sort(5 * rng.rand(40, 1), axis=0)
    y = np.sin(X).ravel()
    y[::5] += 3 * (0.5 - rng.rand(8))
    x = X[:, 0]
    phi = np.column_stack([np.ones_like(x), np.sqrt(3) * x, np.sqrt(3) * x**2, x**3])
    K = (X @ X.T + 1.0) ** 3
    best = np.sqrt(3) * W_OPT[0] * x + np.sqrt(3) * W_OPT[1] * x**2 + W_OPT[2] * x**3 + B_OPT
    lines = [
        "## The polynomial SVR example",
        "",
        "| solver | tol | rows | steps | strides | converged | primal | dual | gap / primal | "
        "distance to the optimum | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for solver in ("alfpgm", "smo"):
        for tol in (1e-3, 1e-5):
            for rows in ("auto", "float32"):
                model = KernelSVR(
                    kernel="poly",
                    C=100,
                    gamma="auto",
                    degree=3,
                    epsilon=0.1,
                    coef0=1,
                    solver=solver,
                    tol=tol,
                    solver_options=dict(row_precision=rows),
                )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t = time.perf_counter()
                    model.fit(X, y)
                    t = time.perf_counter() - t
                beta = np.zeros(len(y))
                beta[model.support_] = model.dual_coef_.ravel()
                f = model.predict(X)
                w = phi.T @ beta
                primal = 0.5 * w @ w + 100 * np.maximum(0.0, np.abs(f - y) - 0.1).sum()
                dual = y @ beta - 0.1 * np.abs(beta).sum() - 0.5 * beta @ K @ beta
                stats = model.fit_stats_
                lines.append(
                    f"| {solver} | {tol:g} | {rows} ({stats['row_precision']}) | "
                    f"{int(model.n_iter_):,} | {stats['strides']} | {model.fit_status_ == 0} | "
                    f"{primal:.5f} | {dual:.5f} | {(primal - dual) / primal:.2e} | "
                    f"{np.abs(f - best).max():.4f} | {t:.2f} |"
                )
    lines += ["", f"The optimum's primal: {OPTIMUM:.9f}.", ""]
    return lines


def child(name: str, solver: str) -> None:
    """One timed Gaussian fit, printed as RESULT json (seconds, digest of the test decisions)."""
    import budgetsvm
    from _data import SETTINGS, load, regression_set

    if name in ("puma8nh", "lowbwt", "mv", "fried"):
        X, Xt, y, _, gamma = regression_set(name)
        est = budgetsvm.KernelSVR(C=10.0, gamma=gamma, epsilon=0.1, solver=solver)
    else:
        X, y, Xt, _ = load(name)
        est = budgetsvm.KernelSVC(C=SETTINGS[name]["C"], gamma=SETTINGS[name]["gamma"], solver=solver)
    t = time.perf_counter()
    est.fit(X, y)
    t = time.perf_counter() - t
    values = est.decision_function(Xt) if hasattr(est, "decision_function") else est.predict(Xt)
    digest = hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()
    print("RESULT " + json.dumps(dict(s=t, digest=digest[:16], file=budgetsvm.__file__)))


def gaussian_part(before: str, rounds: int) -> list:
    builds = {"before": before, "after": sys.executable}
    results: dict = {}
    for r in range(rounds):
        for name, solver in GAUSSIAN:
            for b in ("before", "after") if r % 2 == 0 else ("after", "before"):
                out = subprocess.run(
                    [builds[b], __file__, "--child", name, solver],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
                results.setdefault((name, solver, b), []).append(json.loads(line[7:]))
    lines = [
        "## Gaussian fits: before and after",
        "",
        f"{rounds} rounds, each fit once per build back to back (a child process per fit, the "
        "order alternating): the median fit seconds of each build, and the median over rounds "
        "of a round's after / before (robust to the machine's load changing between rounds).",
        "",
        "| data | solver | s before | s after | after / before (median of rounds) | "
        "same decision values |",
        "|---|---|---|---|---|---|",
    ]
    for name, solver in GAUSSIAN:
        got = {b: results[(name, solver, b)] for b in builds}
        med = {b: statistics.median(x["s"] for x in got[b]) for b in builds}
        ratio = statistics.median(a["s"] / b["s"] for a, b in zip(got["after"], got["before"]))
        same = len({x["digest"] for b in builds for x in got[b]}) == 1
        lines.append(
            f"| {name} | {solver} | {med['before']:.3f} | {med['after']:.3f} | {ratio:.3f} | "
            f"{'yes' if same else 'NO'} |"
        )
    return lines + [""]


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3])
        return
    ap = arguments(__doc__, "--parts", ["example", "gaussian"], default=["example"])
    ap.add_argument("--before", help="python of the previous build (part gaussian)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    lines = header("Kernel rows in f64 and strides", "start")
    if "example" in args.parts:
        lines += example_part()
    if "gaussian" in args.parts:
        if not args.before:
            ap.error("part gaussian needs --before")
        lines += gaussian_part(args.before, args.rounds)
    publish(lines, args.out)


if __name__ == "__main__":
    main()
