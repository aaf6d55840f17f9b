"""BSGD on the 4x4 checkerboard of issue 12, this build against a previous one, alternately.

200,000 training and 100,000 test points, x uniform on [0, 1]^2, label the parity of
floor(4 x1) + floor(4 x2); lambda 1e-4 (C = 0.05), gamma 100, merging by lookup-wd, one thread
(``n_jobs=1``), the estimator's other defaults (averaging, shuffling). Each fit runs in a fresh
process of the Python given, after a tiny warm-up fit that builds the merge lookup table (once per
process: its time is reported on its own line); the time is the wall time of ``fit``. Rounds
alternate the two builds (and which goes first) on the same seed, so drifts of a shared machine
hit both alike; the table gives the median time and the mean accuracy over the rounds.

    python benchmarks/checkerboard.py --baseline-python /work/venvs/baseline/bin/python \\
        --out docs/checkerboard.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _report import commit, machine, publish

WORKER = r"""
import json, os, sys, time
import numpy as np
from budgetsvm import BudgetSVC, simd_level
data, budget, epochs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
d = np.load(data)
t0 = time.perf_counter()
BudgetSVC(budget=5, epochs=1, n_jobs=1).fit(d["X"][:50], d["y"][:50])
warmup = time.perf_counter() - t0
clf = BudgetSVC(C=0.05, gamma=100.0, budget=budget, epochs=epochs, merge="lookup-wd",
                n_jobs=1, random_state=seed)
t0 = time.perf_counter()
clf.fit(d["X"], d["y"])
seconds = time.perf_counter() - t0
s = clf.fit_stats_
print(json.dumps(dict(seconds=seconds, warmup=warmup, acc=clf.score(d["Xt"], d["yt"]),
                      train=s["seconds"], maintenance=s["maintenance_seconds"],
                      events=s["maintenance_events"], simd=simd_level())))
"""


def checkerboard(rng: np.random.Generator, n: int) -> tuple:
    X = rng.uniform(size=(n, 2))
    y = ((np.floor(4 * X[:, 0]) + np.floor(4 * X[:, 1])) % 2).astype(np.int64)
    return X, y


def run(python: str, data: Path, budget: int, epochs: int, seed: int) -> dict:
    proc = subprocess.run(
        [python, "-c", WORKER, str(data), str(budget), str(epochs), str(seed)],
        capture_output=True,
        text=True,
        check=True,
        env={"RAYON_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-python", required=True, help="a Python with the previous build")
    parser.add_argument("--baseline-label", default="before", help="what the previous build is")
    parser.add_argument("--python", default=sys.executable, help="a Python with this build")
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 500, 2000])
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    start = time.perf_counter()
    rng = np.random.default_rng(12)
    X, y = checkerboard(rng, 200_000)
    Xt, yt = checkerboard(rng, 100_000)
    builds = {"before": args.baseline_python, "after": args.python}
    configs = [(b, e) for b in args.budgets for e in args.epochs]
    results: dict = {(name, c): [] for name in builds for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "checkerboard.npz"
        np.savez(data, X=X, y=y, Xt=Xt, yt=yt)
        for r in range(args.rounds):
            order = list(builds) if r % 2 == 0 else list(builds)[::-1]
            for c in configs:
                for name in order:
                    results[name, c].append(run(builds[name], data, c[0], c[1], seed=r))
                    print(name, c, results[name, c][-1], file=sys.stderr)

    def median(name: str, c: tuple, key: str) -> float:
        return float(np.median([x[key] for x in results[name, c]]))

    def accuracy(name: str, c: tuple) -> float:
        return 100 * float(np.mean([x["acc"] for x in results[name, c]]))

    any_result = results["after", configs[0]][0]
    lines = [
        "# BSGD on the checkerboard: this build against the previous one",
        "",
        f"Command: `python benchmarks/checkerboard.py --baseline-python <{args.baseline_label}> "
        f"--out docs/checkerboard.md`  ",
        f"Machine: {machine()}; commit {commit()} against {args.baseline_label}; "
        f"{datetime.date.today()}; kernel loops: before "
        f"{results['before', configs[0]][0]['simd']}, after {any_result['simd']}.",
        "",
        "200,000 training / 100,000 test points of the 4x4 checkerboard on [0, 1]^2, C = 0.05 "
        "(lambda = 1e-4), gamma = 100, lookup-wd merging, one thread. Wall time of `fit` (median "
        f"of {args.rounds} rounds, the builds alternating), test accuracy (mean over the rounds; "
        "round r uses random_state r in both builds). 'maintenance' is the share of the training "
        "loop spent in budget maintenance events (after).",
        "",
        "| B | epochs | before | after | speed-up | accuracy before | accuracy after "
        "| events | maintenance |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in configs:
        b, a = median("before", c, "seconds"), median("after", c, "seconds")
        share = median("after", c, "maintenance") / median("after", c, "train")
        lines.append(
            f"| {c[0]} | {c[1]} | {b:.3f} s | {a:.3f} s | {b / a:.2f}x | "
            f"{accuracy('before', c):.2f}% | {accuracy('after', c):.2f}% | "
            f"{int(median('after', c, 'events')):,} | {100 * share:.0f}% |"
        )
    warm = {n: np.median([x["warmup"] for v in configs for x in results[n, v]]) for n in builds}
    lines += [
        "",
        f"Once per process, before the first fit: building the merge lookup table (the warm-up "
        f"fit): before {warm['before']:.3f} s, after {warm['after']:.3f} s.",
        "",
        f"Run time of this benchmark: {time.perf_counter() - start:.0f} s.",
    ]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
