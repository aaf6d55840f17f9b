"""What the stable ABI (abi3) costs: the same calls timed with two installed builds of budgetsvm.

Give two Python interpreters whose environments hold the two builds (e.g. the abi3 wheel from
``python -m build`` in one virtual environment, a version-specific build in another:
``maturin build --release`` with ``features = []`` in a copy of the project). Each measurement
runs in a fresh process of each interpreter in turn, ``--rounds`` times; the table gives the
medians and their ratio. The calls are the ones where crossing the Python boundary weighs most:
one-row predictions (argument conversion, GIL release), ``partial_fit`` on small batches, and a
whole-test-set prediction for scale.

    python benchmarks/abi3_cost.py --python /tmp/abi3/bin/python --python /tmp/cp311/bin/python \\
        --out docs/wheel_abi3.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import commit, machine, publish  # noqa: E402

SNIPPET = r"""
import json, time, numpy as np
import budgetsvm
from budgetsvm import BudgetSVC, _budgetsvm
rng = np.random.default_rng(0)
X = rng.uniform(-1, 1, size=(20000, 22)); y = (X[:, 0] * X[:, 1] > 0).astype(int)
clf = BudgetSVC(C=10, gamma=2.0, budget=200, epochs=2, random_state=0).fit(X, y)
out = {"abi3": "abi3" in _budgetsvm.__file__}
row = X[:1]
t = time.perf_counter()
for _ in range(5000):
    clf.decision_function(row)
out["decision_function, 1 row (us)"] = (time.perf_counter() - t) / 5000 * 1e6
sv, coef = np.ascontiguousarray(clf.support_vectors_), np.ascontiguousarray(clf.dual_coef_.T)
t = time.perf_counter()
for _ in range(20000):
    _budgetsvm.decision_function(sv, coef, 2.0, row)
out["native decision_function, 1 row (us)"] = (time.perf_counter() - t) / 20000 * 1e6
stream = BudgetSVC(C=10, gamma=2.0, budget=200, random_state=0, polish=False)
stream.partial_fit(X[:100], y[:100], classes=[0, 1])
t = time.perf_counter()
for k in range(2000):
    stream.partial_fit(X[k * 10 % 19990:][:10], y[k * 10 % 19990:][:10])
out["partial_fit, 10 rows (us)"] = (time.perf_counter() - t) / 2000 * 1e6
big = rng.uniform(-1, 1, size=(200000, 22))
t = time.perf_counter(); clf.decision_function(big); out["decision_function, 200,000 rows (ms)"] = (time.perf_counter() - t) * 1e3
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", action="append", required=True, help="an interpreter (twice)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if len(args.python) != 2:
        ap.error("give --python twice")
    runs: dict = {p: [] for p in args.python}
    for _ in range(args.rounds):
        for p in args.python:
            r = subprocess.run([p, "-c", SNIPPET], capture_output=True, text=True, check=True)
            runs[p].append(json.loads(r.stdout.strip().splitlines()[-1]))
    names = [k for k in runs[args.python[0]][0] if k != "abi3"]
    label = {p: ("abi3" if runs[p][0]["abi3"] else "version-specific") for p in args.python}
    a, b = args.python
    rows = []
    for name in names:
        ma = float(np.median([r[name] for r in runs[a]]))
        mb = float(np.median([r[name] for r in runs[b]]))
        rows.append(f"| {name} | {ma:.2f} | {mb:.2f} | {ma / mb:.3f} |")
    lines = [
        "# What abi3 costs",
        "",
        f"Command: `python benchmarks/abi3_cost.py {' '.join(sys.argv[1:])}`; commit {commit()}; "
        f"{machine()}; medians of {args.rounds} fresh processes each, alternated.",
        "",
        f"| call | {label[a]} ({Path(a).parent.parent.name}) | {label[b]} ({Path(b).parent.parent.name}) | ratio |",
        "|---|---|---|---|",
        *rows,
    ]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
