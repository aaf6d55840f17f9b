"""BSGD with golden section search vs lookup-WD merging, against paper 000 (Tables 2 and 3).

For each data set and budget: test accuracy (mean +- std over seeds), total training time,
time in budget maintenance, merging frequency, for gss (eps 0.01) and lookup-wd, measured in
the same run; plus the fraction of merge events where lookup-wd and gss-precise choose the same
partner (a separate diagnostic run, since the comparison costs time). Writes a Markdown report.

    python benchmarks/bsgd_paper000.py --out docs/bsgd_paper000.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import budgetsvm  # noqa: E402
from _data import SETTINGS, load  # noqa: E402
from _report import commit as _commit  # noqa: E402
from _report import machine, publish  # noqa: E402
from budgetsvm import BudgetSVC  # noqa: E402


def run(name, budgets, seeds, epochs):
    X, y, Xt, yt = load(name)
    s = SETTINGS[name]
    rows = []
    for B in budgets:
        methods = (("gss", False), ("lookup-wd", False), ("lookup-wd-avg", True))
        per = {
            m: {k: [] for k in ("acc", "total", "merge", "freq", "ns_kernel")} for m, _ in methods
        }
        # Seeds outer, methods inner: the methods are timed side by side, so a change in the
        # machine's load during the run affects all of them alike.
        for seed in seeds:
            for merge, average in methods:
                clf = BudgetSVC(
                    C=s["C"],
                    gamma=s["gamma"],
                    budget=B,
                    epochs=epochs,
                    merge=merge.removesuffix("-avg"),
                    average=average,
                    random_state=seed,
                )
                t0 = time.perf_counter()
                clf.fit(X, y)
                total = time.perf_counter() - t0
                st = clf.fit_stats_
                r = per[merge]
                r["total"].append(total)
                r["acc"].append(100 * clf.score(Xt, yt))
                r["merge"].append(st["maintenance_seconds"])
                r["freq"].append(100 * st["maintenance_frequency"])
                # Time outside budget maintenance per kernel evaluation (about B per step).
                r["ns_kernel"].append(
                    1e9 * (st["seconds"] - st["maintenance_seconds"]) / (st["iterations"] * B)
                )
        per = {m: {k: np.array(v) for k, v in r.items()} for m, r in per.items()}
        diag = BudgetSVC(
            C=s["C"],
            gamma=s["gamma"],
            budget=B,
            epochs=epochs,
            merge="lookup-wd",
            random_state=seeds[0],
        ).fit(X, y, _compare_with="gss-precise")
        rows.append((B, per, diag.fit_stats_["merge_agreement"]))
        print(
            f"{name} B={B}: gss {per['gss']['acc'].mean():.2f}% "
            f"{per['gss']['total'].mean():.2f}s | lookup-wd {per['lookup-wd']['acc'].mean():.2f}% "
            f"{per['lookup-wd']['total'].mean():.2f}s | agreement {diag.fit_stats_['merge_agreement']:.3f}",
            flush=True,
        )
    return X.shape, Xt.shape, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["a9a", "ijcnn1", "phishing", "w8a"])
    ap.add_argument("--budgets", nargs="+", type=int, default=[100, 500])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    seeds = list(range(args.seeds))
    lines = [
        "# BSGD: golden section search vs lookup-WD merging (paper 000, Tables 2-3)",
        "",
        f"Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`  ",
        f"Machine: {machine()}; kernel loops: {budgetsvm.simd_level()}; budgetsvm "
        f"{budgetsvm.__version__} (commit {_commit()})  ",
        f"Settings: ../shared/data/SETTINGS.md (C, gamma, splits); {args.epochs} epochs; "
        f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]}); timings are wall-clock seconds of `fit`, "
        "both methods measured in the same run.",
        "",
        "gss and lookup-wd columns are plain BSGD (last iterate, `average=False`) as in the paper; "
        "'lookup-wd avg' is the same with `average=True` (suffix averaging over the last epoch).",
        "",
        "| data | B | acc gss | acc lookup-wd | acc lookup-wd avg | paper lookup-wd | total s gss | total s lookup-wd | "
        "time saved | merge s gss | merge s lookup-wd | merge time saved | merge freq | paper freq "
        "| same partner as gss-precise | ns per kernel eval |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in args.datasets:
        shape, tshape, rows = run(name, args.budgets, seeds, args.epochs)
        s = SETTINGS[name]
        for B, per, agreement in rows:
            g, w, a = per["gss"], per["lookup-wd"], per["lookup-wd-avg"]
            paper = s.get(f"paper_b{B}")
            paper_txt = f"{paper[0]:.2f} +- {paper[1]:.2f}" if paper else "-"
            saved = 100 * (1 - w["total"].mean() / g["total"].mean())
            msaved = 100 * (1 - w["merge"].mean() / g["merge"].mean())
            lines.append(
                f"| {name} ({shape[0]}/{tshape[0]}) | {B} | {g['acc'].mean():.2f} +- {g['acc'].std():.2f} "
                f"| {w['acc'].mean():.2f} +- {w['acc'].std():.2f} "
                f"| {a['acc'].mean():.2f} +- {a['acc'].std():.2f} | {paper_txt} "
                f"| {g['total'].mean():.2f} | {w['total'].mean():.2f} | {saved:.0f}% "
                f"| {g['merge'].mean():.2f} | {w['merge'].mean():.2f} | {msaved:.0f}% "
                f"| {w['freq'].mean():.1f}% | {s.get('paper_merge_freq', '-')}% | {100 * agreement:.1f}% "
                f"| {w['ns_kernel'].mean():.1f} |"
            )
    publish(lines, args.out)


if __name__ == "__main__":
    main()
