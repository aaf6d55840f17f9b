"""Markdown report of the criterion micro-benchmarks (run `cargo bench` first).

    cargo bench --bench merge --bench kernel --bench floor && \
        python benchmarks/criterion_report.py --out docs/micro_benchmarks.md \
        [--before /path/to/previous/checkout/target/criterion]

Reads the mean estimates criterion keeps under target/criterion/*/new/estimates.json and puts
them side by side: the budgeted step against the floor of its arithmetic (`benches/floor.rs`),
the step and merge event of a trained BSGD model, one budget-maintenance event per partner search
(lookup vs golden section search) at B = 100 and 500, and kernel rows against a plain multiply-add
loop over the same data. With ``--before`` (the criterion directory of a previous build that ran
the same benches), the step and the maintenance events are also given for that build.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import commit as _commit  # noqa: E402
from _report import machine, publish  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "target" / "criterion"


def mean_ns(*parts: str, root: Path = ROOT) -> float:
    path = root.joinpath(*parts, "new", "estimates.json")
    return json.loads(path.read_text())["mean"]["point_estimate"]


def maybe_ns(*parts: str, root: Path | None) -> float | None:
    if root is None:
        return None
    try:
        return mean_ns(*parts, root=root)
    except OSError:
        return None


def measured(groups, sizes, *benches: str):
    """(group, label, B, the benches' means) for each group and B whose benches have all run."""
    for group, label in groups:
        for B in sizes:
            try:
                means = [mean_ns(group, bench, str(B)) for bench in benches]
            except OSError:
                continue
            yield group, label, B, means


def floor_section(before: Path | None) -> list:
    lines = [
        "## The budgeted step against its floor",
        "",
        "`cargo bench --bench floor`. The floor is only the arithmetic a step cannot avoid (B x nnz "
        "multiply-adds, B exponentials, the decision sum) in one register-blocked pass with the "
        "best SIMD of this CPU and no bounds checks, row gathering or tails; 'step' is "
        "`SupportVectors::kernel_row_and_decision` on the same data (kernel values and decision "
        "value). B is rounded down to a multiple of 16 for the floor's blocks (96, 496, 2000).",
        "",
        "| data | B | floor | exp only | step | step / floor |"
        + (" step before | before / floor |" if before else ""),
        "|---|---|---|---|---|---|" + ("---|---|" if before else ""),
    ]
    steps = (
        ("step_dense_d2", "dense, d = 2"),
        ("step_dense_d22", "dense, d = 22"),
        ("step_dense_d123", "dense, d = 123"),
        ("step_sparse_a9a_like", "sparse, 123 columns, 14 non-zeros"),
    )
    for group, label, B, (floor, exp, step) in measured(
        steps, (96, 496, 2000), "floor", "floor_exp_only", "step"
    ):
        row = f"| {label} | {B} | {floor:.0f} ns | {exp:.0f} ns | {step:.0f} ns | {step / floor:.2f} |"
        old = maybe_ns(group, "step", str(B), root=before)
        if before:
            row += f" {old:.0f} ns | {old / floor:.2f} |" if old else " - | - |"
        lines.append(row)
    lines += [
        "",
        "## Step and merge event of a trained BSGD model",
        "",
        "A model in its steady state (20,000 rows, lambda 1e-4, one epoch, budget full). 'step': "
        "the kernel row and decision value of a fresh row. 'step + event': a step whose row "
        "becomes an SV plus the maintenance event that brings the model back to B (the new SV "
        "merged, with the kernel row its step computed), repeated on one model as training "
        "does; the event costs the difference ('event', insertion included). 'row computed': "
        "the same with the event computing that row again (the event for an SV other than the "
        "new one: BSCA, class weights).",
        "",
        "| data | B | step | step + event | event | event / step | event, row computed "
        "| its / step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    events = (
        ("event_checkerboard_d2", "checkerboard, d = 2, gamma 100"),
        ("event_dense_d22", "uniform, d = 22, gamma 1"),
    )
    for _, label, B, (step, both, full) in measured(
        events, (100, 500, 2000), "step", "step+insert+merge", "step+insert+merge-row-computed"
    ):
        event, event_full = both - step, full - step
        lines.append(
            f"| {label} | {B} | {step:.0f} ns | {both:.0f} ns | {event:.0f} ns "
            f"| {event / step:.2f} | {event_full:.0f} ns | {event_full / step:.2f} |"
        )
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--before", type=Path, default=None, help="target/criterion of a previous build"
    )
    args = ap.parse_args()
    lines = [
        "# Micro-benchmarks (criterion)",
        "",
        "Command: `cargo bench --bench merge --bench kernel --bench floor && python "
        "benchmarks/criterion_report.py --out docs/micro_benchmarks.md"
        + (" --before <previous build>/target/criterion" if args.before else "")
        + "`  ",
        f"Machine: {machine()}; commit {_commit()}; means of criterion's samples.",
        "",
        *floor_section(args.before),
        "## One budget-maintenance event (d = 22, binary, SVs from a9a-like data)",
        "",
        "The event: find the SV with the smallest coefficient, search its best merge partner among "
        "all others, merge (or remove). Share = time relative to golden section search (eps 0.01).",
        "",
        "| B | remove | lookup-wd | lookup-h | gss (eps 0.01) | gss-precise (eps 1e-10) "
        "| lookup-wd share of gss | lookup-h share of gss |"
        + (" lookup-wd before | gss before |" if args.before else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|---|" if args.before else ""),
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
            + (
                f" {mean_ns('maintenance_event', 'merge-lookup-wd', str(B), root=args.before) / 1e3:.2f}"
                f" us | {mean_ns('maintenance_event', 'merge-gss', str(B), root=args.before) / 1e3:.2f}"
                " us |"
                if args.before
                else ""
            )
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
    ]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
