"""Markdown report of the criterion micro-benchmarks (run `cargo bench` first).

    cargo bench --bench merge --bench kernel && python benchmarks/criterion_report.py --out docs/micro_benchmarks.md

Reads the mean estimates criterion keeps under target/criterion/*/new/estimates.json and puts
them side by side: one budget-maintenance event per partner search (lookup vs golden section
search) at B = 100 and 500, and kernel rows against a plain multiply-add loop over the same data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import commit as _commit  # noqa: E402
from _report import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "target" / "criterion"


def mean_ns(*parts: str) -> float:
    path = ROOT.joinpath(*parts, "new", "estimates.json")
    return json.loads(path.read_text())["mean"]["point_estimate"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    lines = [
        "# Micro-benchmarks (criterion)",
        "",
        "Command: `cargo bench --bench merge --bench kernel && python benchmarks/criterion_report.py "
        "--out docs/micro_benchmarks.md`  ",
        f"Machine: {machine()}; commit {_commit()}; means of criterion's samples.",
        "",
        "## One budget-maintenance event (d = 22, binary, SVs from a9a-like data)",
        "",
        "The event: find the SV with the smallest coefficient, search its best merge partner among "
        "all others, merge (or remove). Share = time relative to golden section search (eps 0.01).",
        "",
        "| B | remove | lookup-wd | lookup-h | gss (eps 0.01) | gss-precise (eps 1e-10) "
        "| lookup-wd share of gss | lookup-h share of gss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for B in (100, 500):
        t = {
            m: mean_ns("maintenance_event", m, str(B))
            for m in (
                "remove",
                "merge-lookup-wd",
                "merge-lookup-h",
                "merge-gss",
                "merge-gss-precise",
            )
        }
        g = t["merge-gss"]
        lines.append(
            f"| {B} | {t['remove'] / 1e3:.2f} us | {t['merge-lookup-wd'] / 1e3:.2f} us "
            f"| {t['merge-lookup-h'] / 1e3:.2f} us | {g / 1e3:.2f} us "
            f"| {t['merge-gss-precise'] / 1e3:.1f} us | {100 * t['merge-lookup-wd'] / g:.1f}% "
            f"| {100 * t['merge-lookup-h'] / g:.1f}% |"
        )
    table = mean_ns("lookup_table_build", "400x400")
    lines += [
        "",
        f"Building one 400 x 400 table with precise GSS: {table / 1e6:.0f} ms (once per process, "
        "then shared).",
        "",
        "## Kernel rows: one input row against B support vectors",
        "",
        "'multiply-add only' is the dot products of the row with all SVs (the SV store is "
        "feature-major, so one axpy per non-zero of the row); 'rbf' adds the squared distances and "
        "the vectorised exp, i.e. the full per-step cost of BSGD/BSCA outside budget maintenance.",
        "",
        "| data | B | multiply-add only | rbf | ns per kernel value | rbf / multiply-add |",
        "|---|---|---|---|---|---|",
    ]
    for group, label in (
        ("kernel_row_sparse_2048x123_nnz14", "sparse, 123 features, 14 non-zeros (a9a)"),
        ("kernel_row_dense_2048x123", "dense, 123 features"),
    ):
        for B in (100, 500):
            ma = mean_ns(group, "multiply_add_only", str(B))
            rbf = mean_ns(group, "rbf", str(B))
            lines.append(
                f"| {label} | {B} | {ma:.0f} ns | {rbf:.0f} ns | {rbf / B:.2f} | {rbf / ma:.2f} |"
            )
    block = mean_ns("kernel_block", "rbf_dense", "512x2048x123")
    lines += [
        "",
        f"Parallel kernel block 512 x 2048 (dense, 123 features): {block / 1e6:.1f} ms, "
        f"{block / (512 * 2048):.2f} ns per kernel value.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
