"""Multi-class BSCA: one shared budget of B support vectors (each with one coefficient per class)
against the former design, one model of its own per one-vs-rest problem, at equal model size.

For a model of M support vectors in all (what a prediction costs), the shared design trains with
budget=M; the per-class design needs budget=M/K per class (K classes) for the same size. The
per-class design's runs use the previous build (``--baseline-python``: a Python whose budgetsvm is
a build from before the change, e.g. commit 1880475); it is also run with budget=M per class
(K M SVs: what budget=M meant then). Data: pendigits (K = 10) and dna (K = 3) with their test
splits, C and gamma chosen by 3-fold cross-validation of the exact KernelSVC on the training
split (pendigits C = 10, gamma = 2; dna C = 1, gamma = 0.02). Three seeds each.

    python benchmarks/bsca_shared_budget.py --baseline-python /work/venvs/baseline/bin/python \\
        --out docs/bsca_shared_budget.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _report import commit, machine, publish

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = {
    "pendigits": dict(C=10.0, gamma=2.0),
    "dna": dict(C=1.0, gamma=0.02),
}
SEEDS = (0, 1, 2)

WORKER = r"""
import json, sys, time
import numpy as np
from budgetsvm import BudgetSVC
from budgetsvm.datasets import load_svmlight_file
name, C, gamma, budget, epochs, data = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
X, y = load_svmlight_file(f"{data}/{name}/{name}.scale.xz")
Xt, yt = load_svmlight_file(f"{data}/{name}/{name}.scale.t.xz", n_features=X.shape[1])
out = []
for seed in (0, 1, 2):
    clf = BudgetSVC(C=C, gamma=gamma, budget=budget, epochs=epochs, solver="bsca", random_state=seed)
    t0 = time.perf_counter()
    clf.fit(X, y)
    seconds = time.perf_counter() - t0
    out.append(dict(acc=clf.score(Xt, yt), seconds=seconds, n_sv=int(clf.support_vectors_.shape[0])))
print(json.dumps(out))
"""


def run(python: str, name: str, budget: int, epochs: int) -> list:
    p = SETS[name]
    proc = subprocess.run(
        [python, "-c", WORKER, name, str(p["C"]), str(p["gamma"]), str(budget), str(epochs), str(DATA)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(results: list) -> str:
    acc = np.array([r["acc"] for r in results]) * 100
    secs = np.mean([r["seconds"] for r in results])
    n_sv = max(r["n_sv"] for r in results)
    return f"{acc.mean():.2f} ± {acc.std():.2f} | {n_sv} | {secs:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-python", required=True)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 100, 300, 1000])
    args = parser.parse_args()
    t0 = time.perf_counter()
    k_of = {"pendigits": 10, "dna": 3}
    body = [
        "| data | model size M | shared, budget=M: acc. % | SVs | fit s | per class, budget=M/K: "
        "acc. % | SVs | fit s | per class, budget=M (K M SVs): acc. % | SVs | fit s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in SETS:
        k = k_of[name]
        for m in args.sizes:
            shared = run(sys.executable, name, m, args.epochs)
            split = run(args.baseline_python, name, max(2, m // k), args.epochs)
            old = run(args.baseline_python, name, m, args.epochs)
            row = f"| {name} | {m} | {summary(shared)} | {summary(split)} | {summary(old)} |"
            print(row, flush=True)
            body.append(row)
    head = [
        "# Multi-class BSCA: one shared budget against one budget per class",
        "",
        f"`python benchmarks/bsca_shared_budget.py --baseline-python ... --out "
        f"docs/bsca_shared_budget.md`, {datetime.date.today()}, commit {commit()} against the "
        f"per-class build, {machine()}; {args.epochs} epochs, merging (lookup-wd; the shared "
        f"model merges by the summed objective of all classes, paper 001 eq. 18), test accuracy "
        f"mean ± std over seeds {SEEDS}, largest number of SVs, mean fit seconds "
        f"({time.perf_counter() - t0:.0f} s in all).",
        "",
    ]
    publish(head + body, args.out)


if __name__ == "__main__":
    main()
