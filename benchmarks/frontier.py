"""Accuracy against fit time at large budgets: the frontier of issue 34 (item 5), as a table and a plot.

For each data set, in one process and one run (so the ratios hold on one machine state):

- ``BudgetSVC`` (bsgd, merging, one epoch on the generator and SETTINGS.md's 5 on the real
  sets, polished: the default) at each budget B;
- ``KernelSVC`` (the exact SVM) on subsamples of the training rows (the first 50,000, 100,000,
  200,000, ... that exist and are at most ``--exact-rows``), tested on the whole test set: what
  a user who subsamples gets;
- random-landmark Nystroem(M) + LinearSVC (squared hinge, the same C) at M = each budget, where
  the n x M features fit ``--nystroem-gb``;
- oneDAL's SVC (scikit-learn-intelex, where it is installed: ``pip install
  scikit-learn-intelex``, not a dependency of the package) on the same subsamples, up to
  ``--onedal-rows`` (its fit on 200,000 generator rows takes about twice KernelSVC's and 3.6 GB).

Data: the hard generator of ../shared/data/hard10d.py (C = 1, gamma = 0.5; 50,000 test rows) at
200,000 and 1,000,000 rows, and ijcnn1, a9a, cod-rna (SETTINGS.md's C, gamma and splits). The
multi-class sets (``--sets hardmc-100k hardmc-1M``: ../shared/data/hardmc.py, six classes, C = 1,
gamma = 0.5, one epoch) add ``BudgetSVC(multiclass='shared')`` (the one budgeted run every class
shares; up to ``--shared-rows`` rows and ``--shared-budget``, it takes minutes beyond) and
scikit-learn's
``OneVsOneClassifier`` around ``BudgetSVC(budget=B / 15)`` (the same total of support vectors,
each pair predicted on its own); their report is docs/frontier_multiclass.md.

    python benchmarks/frontier.py --out docs/frontier.md --plot docs/frontier.svg
    python benchmarks/frontier.py --sets hard-200k --budgets 500 1000 3000    # a part

The table lists accuracy (%), fit seconds and the fit's ratio to the exact SVM on all the
training rows (where it ran). The plot draws, per data set, test accuracy against fit seconds
(log scale), one line per method.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import DATA, SETTINGS, load  # noqa: E402
from _report import commit, machine, publish  # noqa: E402

ALL_SETS = ["hard-200k", "hard-1M", "ijcnn1", "a9a", "cod-rna", "hardmc-100k", "hardmc-1M"]
MULTICLASS_SETS = ("hardmc-100k", "hardmc-1M")
# The generated sets: their generator's module and rows.
GENERATED = {
    "hard-200k": ("hard10d", 200_000),
    "hard-1M": ("hard10d", 1_000_000),
    "hardmc-100k": ("hardmc", 100_000),
    "hardmc-1M": ("hardmc", 1_000_000),
}
EXACT_SUBSAMPLES = [50_000, 100_000, 200_000, 500_000, 1_000_000]


def data(name: str):
    """(X, y, Xt, yt, C, gamma, epochs) of a data set."""
    if name in GENERATED:
        # The generators of ../shared/data (C = 1, gamma = 0.5, one epoch; 50,000 test rows).
        module, n = GENERATED[name]
        sys.path.insert(0, str(DATA))
        make = importlib.import_module(module).make
        X, y = make(n, seed=0)
        Xt, yt = make(50_000, seed=1)
        return X, y, Xt, yt, 1.0, 0.5, 1
    X, y, Xt, yt = load(name)
    s = SETTINGS[name]
    return X, y, Xt, yt, s["C"], s["gamma"], 5


def timed_fit(model, X, y):
    start = time.perf_counter()
    model.fit(X, y)
    return time.perf_counter() - start


def accuracy(model, Xt, yt, transform=None):
    return 100.0 * float(np.mean(model.predict(Xt if transform is None else transform(Xt)) == yt))


def timed_accuracy(model, Xt, yt):
    """Test accuracy (%) and the seconds of predicting the test rows."""
    start = time.perf_counter()
    predicted = model.predict(Xt)
    return 100.0 * float(np.mean(predicted == yt)), time.perf_counter() - start


def run_set(name: str, args, rows: list, points: dict) -> None:
    from budgetsvm import BudgetSVC, KernelSVC
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.kernel_approximation import Nystroem
    from sklearn.svm import LinearSVC

    X, y, Xt, yt, C, gamma, epochs = data(name)
    n = X.shape[0]
    label = f"{name} ({n:,} x {X.shape[1]:,})"
    exact_all = None

    def add(method, size, acc, fit, extra=""):
        ratio = f"{fit / exact_all:.2f}x" if exact_all else "-"
        rows.append(f"| {label} | {method} | {size} | {acc:.2f} | {fit:.1f} | {ratio} | {extra} |")
        points.setdefault(name, {}).setdefault(method.split(" (")[0], []).append((fit, acc))
        print(rows[-1], flush=True)

    # The exact SVM on subsamples, largest first is not needed: in size order, all rows last, so
    # the ratio column can use the full fit once it exists (it is printed again below).
    exact = []
    for m in [r for r in EXACT_SUBSAMPLES if r < n] + [n]:
        if m > args.exact_rows:
            continue
        clf = KernelSVC(C=C, gamma=gamma)
        fit = timed_fit(clf, X[:m], y[:m])
        exact.append((m, accuracy(clf, Xt, yt), fit, clf.support_vectors_.shape[0]))
        if m == n:
            exact_all = fit
    for m, acc, fit, n_sv in exact:
        add(
            f"KernelSVC ({'all rows' if m == n else f'first {m:,} rows'})",
            f"{m:,} rows",
            acc,
            fit,
            f"{n_sv:,} SVs",
        )
    onedal = onedal_svc()
    for m in [r for r in EXACT_SUBSAMPLES if r < n] + [n]:
        if onedal is None or m > args.onedal_rows:
            continue
        clf = onedal(C=C, gamma=gamma)
        fit = timed_fit(clf, X[:m], y[:m])
        add(
            f"oneDAL SVC ({'all rows' if m == n else f'first {m:,} rows'})",
            f"{m:,} rows",
            accuracy(clf, Xt, yt),
            fit,
            f"{int(clf.n_support_.sum()):,} SVs",
        )
    multiclass = name in MULTICLASS_SETS
    for B in args.budgets:
        # One-vs-one asked for on the multi-class sets ('auto' takes it from 500 SVs per pair).
        design = {"multiclass": "ovo"} if multiclass else {}
        clf = BudgetSVC(C=C, gamma=gamma, budget=B, epochs=epochs, random_state=0, **design)
        fit = timed_fit(clf, X, y)
        if multiclass:
            acc, predict = timed_accuracy(clf, Xt, yt)
            stats = clf.fit_stats_
            extra = (
                f"one-vs-one; passes {stats['pass_seconds']:.1f} s (summed), polishes "
                f"{stats['polish_seconds']:.1f} s; predict {predict:.2f} s"
            )
            add("BudgetSVC (one-vs-one)", f"B = {B:,}", acc, fit, extra)
            continue
        p = clf.fit_stats_.get("polish") or {}
        extra = (
            f"polish {p.get('seconds', 0):.1f} s, {p.get('iterations', 0)} iterations" if p else ""
        )
        add("BudgetSVC (polished)", f"B = {B:,}", accuracy(clf, Xt, yt), fit, extra)
    if multiclass:
        run_multiclass_peers(X, y, Xt, yt, C, gamma, epochs, args, add)
        return
    for M in args.budgets:
        if n * M * 8 > args.nystroem_gb * 1e9:
            rows.append(
                f"| {label} | Nystroem + LinearSVC | M = {M:,} | - | - | - | features {n * M * 8 / 1e9:.1f} GB > {args.nystroem_gb} GB |"
            )
            continue
        start = time.perf_counter()
        feats = Nystroem(gamma=gamma, n_components=M, random_state=0).fit(X)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            lin = LinearSVC(C=C, dual="auto", max_iter=2000, random_state=0).fit(
                feats.transform(X), y
            )
        fit = time.perf_counter() - start
        add("Nystroem + LinearSVC", f"M = {M:,}", accuracy(lin, Xt, yt, feats.transform), fit)


def run_multiclass_peers(X, y, Xt, yt, C, gamma, epochs, args, add) -> None:
    """The multi-class rows besides the one-vs-one BudgetSVC: the shared budget and
    scikit-learn's one-vs-one wrapper around the binary BudgetSVC at the same total budget."""
    from budgetsvm import BudgetSVC
    from sklearn.multiclass import OneVsOneClassifier

    n_pairs = len(np.unique(y)) * (len(np.unique(y)) - 1) // 2
    for B in args.budgets:
        if X.shape[0] > args.shared_rows or B > args.shared_budget:
            continue
        clf = BudgetSVC(
            C=C, gamma=gamma, budget=B, epochs=epochs, random_state=0, multiclass="shared"
        )
        fit = timed_fit(clf, X, y)
        acc, predict = timed_accuracy(clf, Xt, yt)
        polish = (clf.fit_stats_.get("polish") or {}).get("seconds", 0.0)
        add(
            "BudgetSVC (shared budget)",
            f"B = {B:,}",
            acc,
            fit,
            f"polish {polish:.1f} s; predict {predict:.2f} s",
        )
    for B in args.budgets:
        per_pair = max(B // n_pairs, 2)
        clf = OneVsOneClassifier(
            BudgetSVC(C=C, gamma=gamma, budget=per_pair, epochs=epochs, random_state=0)
        )
        fit = timed_fit(clf, X, y)
        acc, predict = timed_accuracy(clf, Xt, yt)
        n_sv = sum(e.support_vectors_.shape[0] for e in clf.estimators_)
        add(
            "OneVsOneClassifier(BudgetSVC)",
            f"B = {per_pair:,} per pair",
            acc,
            fit,
            f"{n_sv:,} SVs; predict {predict:.2f} s (a predict per pair)",
        )


def onedal_svc():
    """oneDAL's SVC class, or None where scikit-learn-intelex is not installed."""
    try:
        from sklearnex.svm import SVC
    except ImportError:
        return None
    return SVC


def onedal_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"scikit-learn-intelex {version('scikit-learn-intelex')} (every core)"
    except PackageNotFoundError:
        return "not installed (no oneDAL rows)"


def plot(points: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(points)
    fig, axes = plt.subplots(1, len(sets), figsize=(4.5 * len(sets), 4), squeeze=False)
    for ax, name in zip(axes[0], sets):
        for method, pts in points[name].items():
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method)
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("fit seconds (log)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sets", nargs="+", default=ALL_SETS, choices=ALL_SETS)
    ap.add_argument("--budgets", nargs="+", type=int, default=[500, 1000, 3000, 10000])
    ap.add_argument(
        "--exact-rows", type=int, default=200_000, help="the largest subsample KernelSVC fits"
    )
    ap.add_argument(
        "--nystroem-gb", type=float, default=2.0, help="the largest Nystroem feature matrix"
    )
    ap.add_argument(
        "--onedal-rows", type=int, default=200_000, help="the largest subsample oneDAL's SVC fits"
    )
    ap.add_argument(
        "--shared-rows",
        type=int,
        default=200_000,
        help="the most rows BudgetSVC(multiclass='shared') fits (multi-class sets)",
    )
    ap.add_argument(
        "--shared-budget",
        type=int,
        default=3000,
        help="the largest budget BudgetSVC(multiclass='shared') fits (multi-class sets)",
    )
    ap.add_argument("--out", type=Path, help="also write the report there (Markdown)")
    ap.add_argument("--plot", type=Path, help="draw the frontier there (SVG or PNG)")
    args = ap.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    rows: list = []
    points: dict = {}
    start = time.perf_counter()
    for name in args.sets:
        run_set(name, args, rows, points)
    lines = [
        "# Accuracy against fit time at large budgets",
        "",
        f"Machine: {machine()}; commit {commit()}; load average at the end "
        f"{os.getloadavg()[0]:.2f}; {time.perf_counter() - start:.0f} s in all.",
        "",
        "Command: `python benchmarks/frontier.py " + " ".join(argv) + "`",
        "",
        "oneDAL: " + onedal_version(),
        "",
        "| data | method | size | test accuracy % | fit s | fit / exact on all rows | |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    if args.plot:
        plot(points, args.plot)
        lines += ["", f"![accuracy against fit seconds]({args.plot.name})"]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
