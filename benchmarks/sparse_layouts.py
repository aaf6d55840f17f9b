"""Where the sparse support vector storage pays, and how dense merged support vectors get.

Two measurements for ``docs/sparse.md``:

``layouts``  BSGD fit time with ``sv_storage='dense'`` against ``'sparse'`` on text-like CSR
             data (``sparse_text.text_like``) of growing width at a fixed number of non-zeros
             a row, and on a9a (123 columns, from ../shared/data): the measurement behind the
             ``auto`` rule (sparse above 2,048 columns for CSR input). Both storages train the
             same model (tested), so only time differs. Alternated, median of ``--repeats``.
``growth``   the mean number of non-zeros of the support vectors epoch by epoch (merged
             vectors are unions of their parents' columns), with the time per epoch, so the
             step's cost can be followed as the vectors fill in.

    python benchmarks/sparse_layouts.py --out docs/sparse_layouts.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import header, publish  # noqa: E402
from sparse_text import text_like  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def fit_seconds(X, y, storage: str, budget: int, epochs: int = 1, **kw) -> tuple[float, object]:
    from budgetsvm import BudgetSVC

    clf = BudgetSVC(
        C=kw.get("C", 1.0),
        gamma=kw.get("gamma", 0.5),
        budget=budget,
        epochs=epochs,
        random_state=0,
        sv_storage=storage,
        record_history=kw.get("history", False),
    )
    t0 = time.perf_counter()
    clf.fit(X, y)
    return time.perf_counter() - t0, clf


def layouts(args) -> list[str]:
    lines = [
        "## Dense against sparse support vector storage (BSGD, 1 epoch)",
        "",
        "a9a (32,561 rows, 14 non-zeros a row of 123 columns) and w8a (49,749 rows, 12 of 300) "
        "with their SETTINGS.md C and gamma, and "
        f"{args.rows:,} training rows of `text_like` data with about {args.nnz:g} non-zeros a row "
        "(a quarter of the columns for the narrowest; C = 1, gamma = 0.5). Seconds, median of "
        f"{args.repeats} alternated runs; ratio > 1: sparse is slower.",
        "",
        "| data | columns | B | dense s | sparse s | sparse / dense |",
        "|---|---|---|---|---|---|",
    ]
    cases = []
    from budgetsvm.datasets import load_svmlight_file

    # C and gamma from ../shared/data/SETTINGS.md.
    for name, rel, kw in [
        ("a9a", "a9a/a9a.xz", dict(C=32.0, gamma=2.0**-7)),
        ("w8a", "w8a/w8a.xz", dict(C=8.0, gamma=2.0**-5)),
    ]:
        if (SHARED / rel).exists():
            X, y = load_svmlight_file(SHARED / rel)
            cases.append((name, X, y, kw))
    for d in args.features:
        Xtr, ytr, _, _ = text_like(args.rows, 1, d, mean_terms=min(args.nnz, d / 4), seed=0)
        cases.append(("text_like", Xtr, ytr, dict(C=1.0, gamma=0.5)))
    for name, X, y, kw in cases:
        for budget in args.budgets:
            times = {"dense": [], "sparse": []}
            for _ in range(args.repeats):
                for storage in ("dense", "sparse"):
                    times[storage].append(fit_seconds(X, y, storage, budget, **kw)[0])
            dense, sparse = (statistics.median(times[s]) for s in ("dense", "sparse"))
            line = (
                f"| {name} | {X.shape[1]:,} | {budget} | {dense:.3f} | {sparse:.3f} | "
                f"{sparse / dense:.2f} |"
            )
            print(line, file=sys.stderr)
            lines.append(line)
    return lines + [""]


def growth(args) -> list[str]:
    lines = [
        "## Non-zeros of the support vectors over a run (sparse storage)",
        "",
        f"`text_like`, {args.growth_rows:,} rows x {args.growth_features:,} columns, about "
        f"{args.nnz:g} non-zeros a row; C = 1, gamma = 0.5, {args.epochs} epochs. Mean non-zeros "
        "per support vector after each epoch (`history_['mean_sv_nnz']`) and seconds of "
        "training so far.",
        "",
        "| solver | B | epoch | mean SV nnz | seconds so far |",
        "|---|---|---|---|---|",
    ]
    Xtr, ytr, _, _ = text_like(
        args.growth_rows, 1, args.growth_features, mean_terms=args.nnz, seed=1
    )
    from budgetsvm import BudgetSVC

    for solver in ("bsgd", "bsca"):
        for budget in args.budgets:
            clf = BudgetSVC(
                C=1.0,
                gamma=0.5,
                budget=budget,
                epochs=args.epochs,
                solver=solver,
                random_state=0,
                record_history=True,
            ).fit(Xtr, ytr)
            h = clf.history_
            for e, nnz, s in zip(h["epoch"], h["mean_sv_nnz"], h["seconds"]):
                line = f"| {solver} | {budget} | {e} | {nnz:.1f} | {s:.2f} |"
                print(line, file=sys.stderr)
                lines.append(line)
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--nnz", type=float, default=50.0)
    ap.add_argument(
        "--features", type=int, nargs="+", default=[512, 1024, 2048, 4096, 16384, 262144]
    )
    ap.add_argument("--budgets", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--growth-rows", type=int, default=20_000)
    ap.add_argument("--growth-features", type=int, default=1_000_000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--only", choices=["layouts", "growth"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    lines = header(
        "Sparse support vectors: storage choice and growth",
        "start",
    )
    if args.only in (None, "layouts"):
        lines += layouts(args)
    if args.only in (None, "growth"):
        lines += growth(args)
    publish(lines, args.out)


if __name__ == "__main__":
    main()
