"""Training across a Dask cluster: budgetsvm.dask.fit on 1, 2, ... workers against
single-process fit and fit_incremental, on a million generated rows.

Data: the 4x4 checkerboard (rows uniform in [-1, 1]^2, the label the parity of the cell of side
1/2) with 10% of the labels flipped at random, ``--rows`` training rows in ``--chunks`` equal row
blocks (a dask array made from the numpy array) and 100,000 test rows drawn the same way;
C = 10, gamma = 16, B = 200, bsgd, 2 epochs. Each worker count gets a fresh
``LocalCluster(n_workers=w, threads_per_worker=1)`` of processes; the single-process fit uses
every core of this process.

Reported: fit seconds (best of ``--repeat``, the cluster already started), test accuracy, the
polish's Newton iterations and rounds, bytes returned by the workers during the polish (every
round's sums; the data itself stays on the workers), and the speed-up over one worker.

    python benchmarks/dask_scaling.py --out docs/dask_scaling.md          # about 3 minutes
    python benchmarks/dask_scaling.py --workers 1 2 4 8 16 --rows 4000000  # a larger machine
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import commit, machine, publish  # noqa: E402


def checkerboard(n: int, seed: int, noise: float = 0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 2))
    y = ((np.floor(2 * X[:, 0]) + np.floor(2 * X[:, 1])) % 2).astype(int)
    flip = rng.random(n) < noise
    return X, np.where(flip, 1 - y, y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import budgetsvm
    import dask.array as da
    from budgetsvm import BudgetSVC
    from budgetsvm.dask import fit as dask_fit
    from budgetsvm.dask import fit_incremental
    from distributed import Client, LocalCluster

    X, y = checkerboard(args.rows, 0)
    Xt, yt = checkerboard(100_000, 1, noise=0.0)
    params = dict(C=10.0, gamma=16.0, budget=200, epochs=2, random_state=0)
    rows = []

    def best(fn):
        times, out = [], None
        for _ in range(args.repeat):
            start = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - start)
        return min(times), out

    t, clf = best(lambda: BudgetSVC(**params).fit(X, y))
    p = clf.fit_stats_["polish"]
    rows.append(
        f"| single process `fit` ({budgetsvm.get_num_threads()} threads) | {t:.2f} | "
        f"{100 * clf.score(Xt, yt):.2f} | {p['iterations']} | - | - | - |"
    )
    print(rows[-1], flush=True)
    size = -(-args.rows // args.chunks)
    dX = da.from_array(X, chunks=(size, 2))
    dy = da.from_array(y, chunks=(size,))
    one = None
    for w in args.workers:
        if w > (os.cpu_count() or 1):
            rows.append(f"| `budgetsvm.dask.fit`, {w} workers | (not run: {os.cpu_count()} cores) | | | | | |")
            continue
        with LocalCluster(
            n_workers=w, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster, Client(cluster):
            if w == args.workers[0]:
                t_inc, inc = best(
                    lambda: fit_incremental(
                        BudgetSVC(**{**params, "polish": False}), dX, dy, classes=[0, 1],
                        epochs=2, n_samples=args.rows,
                    )
                )
                rows.append(
                    f"| `fit_incremental` (2 passes, {w} worker{'s' if w > 1 else ''}; no polish) | "
                    f"{t_inc:.2f} | {100 * inc.score(Xt, yt):.2f} | - | - | - | - |"
                )
                print(rows[-1], flush=True)
            t, clf = best(lambda: dask_fit(BudgetSVC(**params), dX, dy))
            one = one or t
            p, _d = clf.fit_stats_["polish"], clf.fit_stats_["dask"]
            rows.append(
                f"| `budgetsvm.dask.fit`, {w} worker{'s' if w > 1 else ''} | {t:.2f} | "
                f"{100 * clf.score(Xt, yt):.2f} | {p['iterations']} | {p['rounds']} | "
                f"{p['bytes_moved'] / 1e6:.1f} MB | {one / t:.2f} |"
            )
            print(rows[-1], flush=True)
    lines = [
        "# Training across a Dask cluster",
        "",
        f"Command: `python benchmarks/dask_scaling.py {' '.join(sys.argv[1:])}`; commit {commit()}; "
        f"{machine()}; {time.strftime('%Y-%m-%d')}.",
        "",
        f"Data: {args.rows:,} checkerboard rows (2-D, 4x4 cells, 10% of labels flipped), "
        f"{args.chunks} row blocks; 100,000 clean test rows; C = 10, gamma = 16, B = 200, bsgd, "
        "2 epochs. Seconds are the best of "
        f"{args.repeat} with the cluster started. Bytes: what the workers returned to this process "
        "during the polish (the rows never leave the workers).",
        "",
        "| method | fit s | test accuracy % | Newton iterations | polish rounds | bytes | speed-up over 1 worker |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "`fit_incremental` returns the averaged BSGD model of `partial_fit` without a polish. On "
        "these noisy labels the averaged budgeted model is poor in a single process too "
        "(`BudgetSVC(..., polish=False).fit` with the same settings), while the last iterate "
        "and every polished model are not: the polish keeps the basis and re-solves the "
        "coefficients (`docs/polish_notes.md`).",
    ]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
