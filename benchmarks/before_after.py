"""The same benchmark under two builds of budgetsvm, alternated in one run: did a change make
the dense / low-dimensional path slower?

Runs ``bsgd_paper000.run`` (BSGD on the paper-000 data sets with their SETTINGS.md C and gamma:
gss, lookup-wd and lookup-wd with averaging, several seeds) in a fresh child process per data set
and round, alternating the interpreter of the previous build (``--before``, e.g. a virtual
environment with the previous commit's wheel installed) and this one. Reports the median over
rounds of each method's mean fit time and accuracy, and the time ratio after / before.

    python -m venv --system-site-packages /tmp/before
    /tmp/before/bin/pip install --no-deps path/to/previous.whl
    python benchmarks/before_after.py --before /tmp/before/bin/python --out docs/sparse_dense_path.md

``--suite engine`` times instead, per data set, the engine's main paths in each build: the
budgeted step (BSGD, no polish), the polish (BSGD then the polish), prediction (decision values
of the polished model on the test rows) and the exact fit (KernelSVC), each the best of
``--repeat`` runs, and a digest of every model's decision values, so the report also says
whether the two builds train the same models bit for bit (a refactoring's check).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import header, publish  # noqa: E402

CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
import budgetsvm, bsgd_paper000
_, _, rows = bsgd_paper000.run({name!r}, {budgets!r}, {seeds!r}, {epochs!r})
out = {{"version_file": budgetsvm.__file__, "rows": []}}
for B, per, agreement in rows:
    out["rows"].append({{"B": B, **{{m: {{"total": float(r["total"].mean()),
        "acc": float(r["acc"].mean())}} for m, r in per.items()}}}})
print("RESULT " + json.dumps(out))
"""


ENGINE_CHILD = """
import hashlib, json, sys, time
sys.path.insert(0, {bench!r})
import numpy as np
import budgetsvm
from _data import SETTINGS, load
Xtr, ytr, Xte, yte = load({name!r})
C, gamma = SETTINGS[{name!r}]["C"], SETTINGS[{name!r}]["gamma"]

def best(fn):
    times = []
    for _ in range({repeat!r}):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out

def digest(est):
    d = np.ascontiguousarray(est.decision_function(Xte), dtype=np.float64)
    return hashlib.sha256(d.tobytes()).hexdigest()[:16]

def budgeted(polish):
    return budgetsvm.BudgetSVC(C=C, gamma=gamma, budget={budget!r}, epochs=1, polish=polish,
                               random_state=0).fit(Xtr, ytr)

out = {{"version_file": budgetsvm.__file__, "rows": {{}}}}
t, est = best(lambda: budgeted(False))
out["rows"]["budgeted step"] = dict(s=t, digest=digest(est))
t, est = best(lambda: budgeted(True))
out["rows"]["polish"] = dict(s=t, digest=digest(est))
t, _ = best(lambda: est.decision_function(Xte))
out["rows"]["predict"] = dict(s=t, digest=digest(est))
t, exact = best(lambda: budgetsvm.KernelSVC(C=C, gamma=gamma).fit(Xtr, ytr))
out["rows"]["exact fit"] = dict(s=t, digest=digest(exact))
print("RESULT " + json.dumps(out))
"""


def run_engine_child(python: str, name: str, args) -> dict:
    code = ENGINE_CHILD.format(
        bench=str(Path(__file__).resolve().parent),
        name=name,
        repeat=args.repeat,
        budget=args.budgets[-1],
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def engine_report(results: dict, args) -> list:
    """The engine suite's table: median over rounds of each path's best time, per build."""
    first = results["before"][args.datasets[0]][0]
    lines = [
        "| data | path | s before | s after | after / before | same decision values |",
        "|---|---|---|---|---|---|",
    ]
    for d in args.datasets:
        for path in first["rows"]:

            def med(b, d=d, path=path):
                return statistics.median(x["rows"][path]["s"] for x in results[b][d])

            digests = {x["rows"][path]["digest"] for b in results for x in results[b][d]}
            tb, ta = med("before"), med("after")
            lines.append(
                f"| {d} | {path} | {tb:.3f} | {ta:.3f} | {ta / tb:.3f} | "
                f"{'yes' if len(digests) == 1 else 'NO'} |"
            )
    return lines


def run_child(python: str, name: str, args) -> dict:
    code = CHILD.format(
        bench=str(Path(__file__).resolve().parent),
        name=name,
        budgets=args.budgets,
        seeds=list(range(args.seeds)),
        epochs=args.epochs,
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--before", required=True, help="python of the previous build")
    ap.add_argument("--datasets", nargs="+", default=["a9a", "w8a", "ijcnn1"])
    ap.add_argument("--budgets", nargs="+", type=int, default=[100, 500])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--suite", choices=["bsgd", "engine"], default="bsgd")
    ap.add_argument("--repeat", type=int, default=3, help="engine suite: best of this many runs")
    args = ap.parse_args()
    child = run_engine_child if args.suite == "engine" else run_child
    builds = {"before": args.before, "after": sys.executable}
    results: dict = {b: {d: [] for d in args.datasets} for b in builds}
    for r in range(args.rounds):
        for d in args.datasets:
            order = list(builds) if r % 2 == 0 else list(reversed(builds))
            for b in order:
                res = child(builds[b], d, args)
                results[b][d].append(res)
                print(f"round {r} {d} {b}: {json.dumps(res['rows'])}", file=sys.stderr)
    before_file = results["before"][args.datasets[0]][0]["version_file"]
    if args.suite == "engine":
        lines = header(
            "The engine's paths: before and after, alternated in one run",
            "end",
        ) + [
            f"Per data set (SETTINGS.md C and gamma), BudgetSVC B = {args.budgets[-1]}, one epoch, "
            f"seed 0; each cell the median over {args.rounds} alternated rounds of the best of "
            f"{args.repeat} runs. Before: {before_file}.",
            "",
        ]
        publish(lines + engine_report(results, args), args.out)
        return
    lines = header(
        "Dense and low-dimensional path: before and after, alternated in one run",
        "end",
    ) + [
        f"`bsgd_paper000.run` per data set: BSGD, {args.epochs} epochs, seeds 0..{args.seeds - 1}, "
        f"SETTINGS.md C and gamma; each cell the median over {args.rounds} alternated rounds of the "
        f"mean over seeds. Before: {before_file}.",
        "",
        "| data | B | method | fit s before | fit s after | after / before | "
        "accuracy % before | accuracy % after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in args.datasets:
        for k, B in enumerate(args.budgets):
            for m in ("gss", "lookup-wd", "lookup-wd-avg"):

                def med(b, key, k=k, m=m, d=d):
                    return statistics.median(x["rows"][k][m][key] for x in results[b][d])

                tb, ta = med("before", "total"), med("after", "total")
                lines.append(
                    f"| {d} | {B} | {m} | {tb:.2f} | {ta:.2f} | {ta / tb:.3f} | "
                    f"{med('before', 'acc'):.2f} | {med('after', 'acc'):.2f} |"
                )
    publish(lines, args.out)


if __name__ == "__main__":
    main()
