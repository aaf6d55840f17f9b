"""Streaming BSGD on the checkerboard of paper 001 (section 7.2, Table 6): memory and accuracy.

The 4x4 checkerboard (uniform on [0, 4]^2, alternating classes, features scaled to mean 0 and
standard deviation 1) is generated in chunks, never whole, and fed to ``BudgetSVC.partial_fit``
(BPegasos with merging, lambda = 1e-4 as in Table 6). Each (budget, rows) configuration runs
in a fresh process, so its peak resident set size (``ru_maxrss``) is that configuration's alone.
Reports rows, budget, training time and rate, peak RSS and test accuracy on 100,000 fresh
points next to Table 6 (99.55% at B = 100, 99.74% at B = 500).

    nice -n 10 python benchmarks/stream_checkerboard.py --rows 1000000 10000000 \
        --budgets 100 500 --out docs/streaming_results.md

Paper 001 writes the kernel as exp(-sigma |x - x'|^2) with "kernel width sigma = 0.0625";
``--gamma`` sets the gamma of exp(-gamma |x - x'|^2) (default: that sigma).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine  # noqa: E402

PAPER_TABLE6 = {100: 99.55, 500: 99.74}
SCALE = 4.0 / np.sqrt(12.0)  # standard deviation of U[0, 4]


def checkerboard(rng: np.random.Generator, n: int):
    """n points of the 4x4 checkerboard, standardised; labels -1/+1."""
    U = rng.uniform(0.0, 4.0, size=(n, 2))
    y = np.where((np.floor(U[:, 0]) + np.floor(U[:, 1])) % 2 == 0, 1, -1)
    return (U - 2.0) / SCALE, y


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024.0 * 1024.0) if sys.platform == "darwin" else rss / 1024.0


def run_one(args: argparse.Namespace) -> dict:
    """One configuration, in this process."""
    from budgetsvm import BudgetSVC

    rss_start = peak_rss_mb()
    clf = BudgetSVC(
        lam=args.lam,
        gamma=args.gamma,
        budget=args.budget,
        merge=args.merge,
        average=not args.no_average,
        shuffle=False,  # the stream is already in random order
        random_state=args.seed,
    )
    rng = np.random.default_rng(args.seed)
    done = 0
    train_s = 0.0
    t0 = time.perf_counter()
    while done < args.rows:
        n = min(args.chunk, args.rows - done)
        X, y = checkerboard(rng, n)
        t1 = time.perf_counter()
        clf.partial_fit(X, y, classes=[-1, 1], n_samples=args.rows)
        train_s += time.perf_counter() - t1
        done += n
    wall = time.perf_counter() - t0
    X_test, y_test = checkerboard(np.random.default_rng(10**6 + args.seed), 100_000)
    acc = 100.0 * clf.score(X_test, y_test)
    return dict(
        rows=args.rows,
        budget=args.budget,
        gamma=args.gamma,
        lam=args.lam,
        chunk=args.chunk,
        accuracy=acc,
        train_seconds=train_s,
        wall_seconds=wall,
        rows_per_second=args.rows / wall,
        peak_rss_mb=peak_rss_mb(),
        rss_before_training_mb=rss_start,
        n_sv=int(clf.support_vectors_.shape[0]),
        merge_frequency=clf.fit_stats_["maintenance_frequency"],
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--budgets", type=int, nargs="+", default=[100, 500])
    p.add_argument("--chunk", type=int, default=100_000, help="rows per partial_fit call")
    p.add_argument("--gamma", type=float, default=0.0625)
    p.add_argument("--lam", type=float, default=1e-4)
    p.add_argument("--merge", default="lookup-wd")
    p.add_argument("--no-average", action="store_true", help="plain BSGD: the last iterate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="append a Markdown table to this file")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        args.rows = args.rows[0]
        print(json.dumps(run_one(args)), flush=True)
        return 0

    results = []
    for budget in args.budgets:
        for rows in args.rows:
            cmd = [sys.executable, __file__, "--one", "--rows", str(rows), "--budget", str(budget)]
            cmd += ["--chunk", str(args.chunk), "--gamma", repr(args.gamma)]
            cmd += ["--lam", repr(args.lam), "--merge", args.merge, "--seed", str(args.seed)]
            cmd += ["--no-average"] if args.no_average else []
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            results.append(r)
            print(
                f"B={budget:4d} rows={rows:>11,}: acc {r['accuracy']:.2f}% "
                f"(paper {PAPER_TABLE6.get(budget, float('nan'))}%), "
                f"{r['wall_seconds']:.1f} s ({r['rows_per_second']:,.0f} rows/s), "
                f"peak RSS {r['peak_rss_mb']:.1f} MB, merges {100 * r['merge_frequency']:.1f}%",
                flush=True,
            )
    if args.out:
        lines = [
            "",
            f"Machine: {machine()}; budgetsvm {__import__('budgetsvm').__version__}; "
            f"gamma = {args.gamma}, lambda = {args.lam}, merge = {args.merge}, "
            f"{'last iterate' if args.no_average else 'averaged iterates'}, "
            f"chunks of {args.chunk:,} rows, seed {args.seed}.",
            f"Command: `{' '.join(['python'] + [Path(sys.argv[0]).as_posix()] + sys.argv[1:])}`",
            "",
            "| B | rows | test accuracy | paper 001 Table 6 | wall s | rows/s | RSS after imports MB "
            "| peak RSS MB | merge freq |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in results:
            lines.append(
                f"| {r['budget']} | {r['rows']:,} | {r['accuracy']:.2f}% "
                f"| {PAPER_TABLE6.get(r['budget'], float('nan'))}% | {r['wall_seconds']:.1f} "
                f"| {r['rows_per_second']:,.0f} | {r['rss_before_training_mb']:.1f} "
                f"| {r['peak_rss_mb']:.1f} "
                f"| {100 * r['merge_frequency']:.1f}% |"
            )
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
