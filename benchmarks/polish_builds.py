"""docs/polish.md's budgeted rows on two builds of budgetsvm, alternated on one machine.

The polish table's seconds are one day's on one machine; a later rerun on a busier or slower
machine cannot say whether a change made a row slower. This runs the ``BudgetSVC`` rows of
``benchmarks/polish.py`` (the same data, C, gamma, budgets, epochs and seed; bsgd and bsca,
polished and not) with the installed build and with another one (``--baseline``: a folder
holding a ``budgetsvm`` package, e.g. made by ``pip install --no-deps --target DIR .`` in a
worktree of an older commit), one data set at a time, the two builds alternating, each row
fitted ``--repeats`` times in a fresh process per build and set; it reports each build's best
fit seconds, their ratio and both accuracies.

    git worktree add /tmp/wt_old 15336b9
    (cd /tmp/wt_old && CARGO_TARGET_DIR=/tmp/t_oldtarget pip install --no-deps --target /tmp/t_old .)
    python benchmarks/polish_builds.py --baseline /tmp/t_old --baseline-name 15336b9 \
        --out docs/polish_builds.md   # about 5 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _report import commit, machine, publish  # noqa: E402
from polish import ALL_SETS  # noqa: E402

# Run in a fresh interpreter per build and data set: prints one JSON line per row.
CHILD = r"""
import json, sys, time, warnings
sys.path.insert(0, sys.argv[1])
warnings.filterwarnings("ignore")
import numpy as np
import budgetsvm
from polish import budgeted_rows, data
name, budgets, seed, repeats = sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
X, y, Xt, yt, C, gamma, fixed, epochs = data(name)
for B in fixed or budgets:
    for solver, polish, clf in budgeted_rows(B, C, gamma, epochs, seed):
        fits, stats = [], {}
        for _ in range(repeats):
            start = time.perf_counter()
            clf.fit(X, y)
            fits.append(time.perf_counter() - start)
            stats = clf.fit_stats_.get("polish", {}) if polish else {}
        print(json.dumps({
            "B": B, "solver": solver, "polish": polish, "fit": min(fits),
            "accuracy": 100 * float(np.mean(clf.predict(Xt) == yt)),
            "iterations": stats.get("iterations"), "file": budgetsvm.__file__,
        }), flush=True)
"""


def run_build(path: str | None, name: str, budgets: list, seed: int, repeats: int) -> list:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if path:
        env["PYTHONPATH"] = str(Path(path).resolve())
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE), name, json.dumps(budgets), str(seed), str(repeats)],
        env=env, capture_output=True, text=True, check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="folder holding the other build's budgetsvm package")
    ap.add_argument("--baseline-name", default=None, help="what to call it (default: the folder)")
    ap.add_argument("--sets", nargs="+", default=ALL_SETS, choices=ALL_SETS)
    ap.add_argument("--budgets", nargs="+", type=int, default=[100, 500])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not (Path(args.baseline) / "budgetsvm").is_dir():
        sys.exit(f"--baseline {args.baseline}: no budgetsvm package in it")
    base = args.baseline_name or args.baseline
    lines = [
        "# The polish table's budgeted rows: this build against another, alternated",
        "",
        f"Command: `python benchmarks/polish_builds.py {' '.join(sys.argv[1:])}`; commit {commit()} "
        f"against {base}; {machine()}; seed {args.seed}; {time.strftime('%Y-%m-%d')}.",
        "",
        f"Best of {args.repeats} fits per row and build, the builds alternating per data set (each in a "
        "fresh process); ratio: this build's fit over the other's. Polish iterations: the Newton "
        "iterations on all rows. Data and settings: `benchmarks/polish.py`.",
        "",
        f"| data | B | method | fit s ({base}) | fit s (this) | ratio | accuracy ({base}) | accuracy (this) "
        "| polish iterations |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows, polished = [], []
    for name in args.sets:
        old = run_build(args.baseline, name, args.budgets, args.seed, args.repeats)
        new = run_build(None, name, args.budgets, args.seed, args.repeats)
        if any(r["file"].startswith(str(Path(args.baseline).resolve())) for r in new):
            sys.exit("the installed build is the baseline: install this checkout first")
        for a, b in zip(old, new):
            method = f"{b['solver']}{', polished' if b['polish'] else ''}"
            its = f"{a['iterations']} -> {b['iterations']}" if b["polish"] else ""
            rows.append(
                f"| {name} | {b['B']} | {method} | {a['fit']:.2f} | {b['fit']:.2f} | "
                f"{b['fit'] / a['fit']:.2f} | {a['accuracy']:.2f} | {b['accuracy']:.2f} | {its} |"
            )
            print(rows[-1], flush=True)
            if b["polish"]:
                polished.append(b["fit"] / a["fit"])
    if polished:
        polished.sort()
        rows += [
            "",
            f"Polished rows: fit ratio median {polished[len(polished) // 2]:.2f}, range "
            f"{polished[0]:.2f}-{polished[-1]:.2f} over {len(polished)} rows.",
        ]
    publish(lines + rows, args.out)


if __name__ == "__main__":
    main()
