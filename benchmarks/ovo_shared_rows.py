"""KernelSVC one-vs-one: kernel rows shared by the class pairs against rows per pair, in one run.

With more than two classes KernelSVC trains K(K-1)/2 pair problems. ``solver_options=
{'shared_rows': True}`` (the default) has every pair take the part of a row against the row's own
class from one store shared by all pairs (computed once for the K - 1 pairs a row is in);
``False`` gives each pair only rows of its own, as LIBSVM does. Data: pendigits and shuttle
(../shared/data, C and gamma of benchmarks/_data.py) and a 26-class set drawn like pendigits
(16 features in [-1, 1], 4 Gaussian clusters per class, seed 0), because a row is shared by
K - 1 pairs and 10 classes is few. Per configuration: wall seconds and process CPU seconds of a
fit (median of the rounds, configurations alternating within a round), kernel values computed,
test accuracy, support vectors, and the largest difference of the one-vs-one decision values
between the two ways (the same model to rounding).

    python benchmarks/ovo_shared_rows.py --out docs/ovo_shared_rows.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import budgetsvm
import numpy as np
import scipy.sparse as sp
from _data import SETTINGS, load
from _report import commit, machine, publish
from budgetsvm import KernelSVC

DATASETS = ["pendigits", "shuttle", "letters26"]


def letters26(seed: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """26 classes, 16 features in [-1, 1] (pendigits' shape), 4 clusters per class."""
    rng = np.random.default_rng(seed)
    classes, clusters, d = 26, 4, 16
    centres = rng.uniform(-1.0, 1.0, size=(classes * clusters, d))

    def draw(n: int) -> Tuple[np.ndarray, np.ndarray]:
        k = rng.integers(0, classes * clusters, size=n)
        X = np.clip(centres[k] + rng.normal(0.0, 0.35, size=(n, d)), -1.0, 1.0)
        return X, k // clusters

    X, y = draw(20_000)
    Xt, yt = draw(5_000)
    return X, y, Xt, yt


def data(name: str):
    if name == "letters26":
        X, y, Xt, yt = letters26()
        return X, y, Xt, yt, 10.0, 2.0
    X, y, Xt, yt = load(name)
    dense = [m.toarray() if sp.issparse(m) else np.asarray(m) for m in (X, Xt)]
    return dense[0], y, dense[1], yt, SETTINGS[name]["C"], SETTINGS[name]["gamma"]


CONFIGS = [
    ("ALFPGM, shared rows", "alfpgm", True, None),
    ("ALFPGM, rows per pair", "alfpgm", False, None),
    ("ALFPGM, shared rows, 1 thread", "alfpgm", True, 1),
    ("ALFPGM, rows per pair, 1 thread", "alfpgm", False, 1),
    ("SMO, shared rows", "smo", True, None),
    ("SMO, rows per pair", "smo", False, None),
]


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def fit(X, y, C: float, gamma: float, solver: str, shared: bool, threads: Any) -> Dict[str, Any]:
    clf = KernelSVC(
        C=C,
        gamma=gamma,
        solver=solver,
        n_jobs=threads,
        decision_function_shape="ovo",
        solver_options=dict(shared_rows=shared),
    )
    c0, t0 = cpu_seconds(), time.perf_counter()
    clf.fit(X, y)
    return dict(seconds=time.perf_counter() - t0, cpu=cpu_seconds() - c0, clf=clf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", default=DATASETS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    started = time.perf_counter()
    lines: List[str] = [
        "# One-vs-one: kernel rows shared by the class pairs vs rows per pair",
        "",
        f"Command: `python {' '.join(sys.argv)}`  ",
        f"Machine: {machine()}; budgetsvm SIMD path {budgetsvm.simd_level()}; commit {commit()}  ",
        f"Date {datetime.date.today()}, Python {platform.python_version()}, budgetsvm "
        f"{budgetsvm.__version__}, threads {budgetsvm.get_num_threads()}, load average at the "
        f"start {', '.join(f'{v:.2f}' for v in os.getloadavg())}  ",
        "KernelSVC defaults (tol 1e-3, cache_size 200 MB) but for `solver` and `solver_options="
        "{'shared_rows': ...}`; times are the median of "
        f"{args.rounds} rounds, the configurations alternating within each round. CPU: user + "
        "system seconds of the process during the fit (all threads). Kernel values: computed, "
        "over all pairs (a row's own-class part once when shared). Decision difference: the "
        "largest |difference| of the one-vs-one decision values on the test rows against the "
        "same solver with rows per pair.",
        "",
        "| data set | rows x features, classes | configuration | time (s) | CPU (s) | kernel "
        "values (M) | test accuracy | SVs | decision difference |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in args.datasets:
        X, y, Xt, yt, C, gamma = data(name)
        shape = f"{X.shape[0]} x {X.shape[1]}, {len(np.unique(y))}"
        runs: Dict[str, List[Dict[str, Any]]] = {label: [] for label, *_ in CONFIGS}
        for _ in range(args.rounds):
            for label, solver, shared, threads in CONFIGS:
                runs[label].append(fit(X, y, C, gamma, solver, shared, threads))
        for label, solver, _shared, _threads in CONFIGS:
            r = runs[label]
            clf = r[-1]["clf"]
            ref = runs[f"{solver.upper()}, rows per pair"][-1]["clf"]
            diff = np.abs(clf.decision_function(Xt) - ref.decision_function(Xt)).max()
            lines.append(
                f"| {name} | {shape} | {label} | "
                f"{statistics.median(x['seconds'] for x in r):.3f} | "
                f"{statistics.median(x['cpu'] for x in r):.3f} | "
                f"{clf.fit_stats_['kernel_values'] / 1e6:.1f} | "
                f"{np.mean(clf.predict(Xt) == yt):.2%} | {clf.support_vectors_.shape[0]} | "
                f"{diff:.1e} |"
            )
            print(lines[-1], flush=True)
    lines += ["", f"Total benchmark time {time.perf_counter() - started:.0f} s."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
