"""Model selection against scikit-learn's searches (issue 62): time, choice and test score.

For each data set, in one process (so the ratios hold on one machine state), over the same grid
and the same folds (3, shuffled, seed 0):

- ``GridSearchCV`` around the estimator (n_jobs=1: the estimators use every core themselves),
  skipped above ``--grid-rows`` training rows (hours on a million rows);
- ``HalvingGridSearchCV`` (factor 3, its default resources: rows);
- budgetsvm's own: ``KernelSVCCV`` / ``KernelSVRCV`` on the real sets (search='auto'),
  ``BudgetSVCCV(budgets='auto')`` on the generator.

Grids (g0 the set's gamma in SETTINGS.md, d its features): the classification sets C {1, 4, 16,
64} x gamma {g0/4, g0, 4 g0}; hard10d C {0.25, 1, 4} x gamma {0.125, 0.5, 2}, the searches
around ``BudgetSVC(budget=3000, epochs=1)``; the regression sets C {0.3, 1, 3, 10} x gamma
{1/(4d), 1/d, 4/d}, epsilon 0.1. Each line: seconds (search and refit), the ratio to
GridSearchCV's (HalvingGridSearchCV's where it did not run), the choice, its mean CV score and
the refitted model's test score.

    python benchmarks/model_selection.py --out docs/model_selection_figures.md
    python benchmarks/model_selection.py --sets a9a puma8nh          # a part
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import DATA, SETTINGS, load, regression_set  # noqa: E402
from _report import arguments, header, publish  # noqa: E402

ALL_SETS = ["a9a", "ijcnn1", "cod-rna", "hard-200k", "hard-1M", "fried", "puma8nh"]
GENERATED = {"hard-200k": 200_000, "hard-1M": 1_000_000}
REGRESSION = ("fried", "puma8nh")


def problem(name):
    """Rows, the grid, the estimator the scikit-learn searches wrap, and budgetsvm's search."""
    import budgetsvm

    if name in GENERATED:
        sys.path.insert(0, str(DATA))
        from hard10d import make

        X, y = make(GENERATED[name], seed=0)
        Xt, yt = make(50_000, seed=1)
        Cs, gammas = [0.25, 1.0, 4.0], [0.125, 0.5, 2.0]
        base = budgetsvm.BudgetSVC(budget=3000, epochs=1, random_state=0)
        ours = budgetsvm.BudgetSVCCV(Cs=Cs, gammas=gammas, epochs=1, random_state=0)
        return X, y, Xt, yt, {"C": Cs, "gamma": gammas}, base, ours
    if name in REGRESSION:
        X, Xt, y, yt, _ = regression_set(name)
        d = X.shape[1]
        Cs, gammas = [0.3, 1.0, 3.0, 10.0], [1 / (4 * d), 1 / d, 4 / d]
        base = budgetsvm.KernelSVR(epsilon=0.1)
        ours = budgetsvm.KernelSVRCV(Cs=Cs, gammas=gammas, epsilon=0.1, random_state=0)
        return X, y, Xt, yt, {"C": Cs, "gamma": gammas}, base, ours
    X, y, Xt, yt = load(name)
    g0 = SETTINGS[name]["gamma"]
    Cs, gammas = [1.0, 4.0, 16.0, 64.0], [g0 / 4, g0, 4 * g0]
    base = budgetsvm.KernelSVC()
    ours = budgetsvm.KernelSVCCV(Cs=Cs, gammas=gammas, random_state=0)
    return X, y, Xt, yt, {"C": Cs, "gamma": gammas}, base, ours


def main() -> int:
    ap = arguments(__doc__, "--sets", ALL_SETS)
    ap.add_argument(
        "--grid-rows", type=int, default=300_000,
        help="run GridSearchCV up to this many training rows (default 300,000)",
    )
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.model_selection import GridSearchCV, HalvingGridSearchCV, KFold, StratifiedKFold

    lines = header(
        "Model selection against GridSearchCV and HalvingGridSearchCV",
        "start",
    )
    lines += [
        "| set | rows | search | seconds | x GridSearchCV | choice | CV | test |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in args.sets:
        X, y, Xt, yt, grid, base, ours = problem(name)
        regression = name in REGRESSION
        folds = (KFold if regression else StratifiedKFold)(3, shuffle=True, random_state=0)
        scale = 1.0 if regression else 100.0
        searches = []
        if X.shape[0] <= args.grid_rows:
            searches.append(("GridSearchCV", GridSearchCV(base, grid, cv=folds, n_jobs=1)))
        searches.append(
            ("HalvingGridSearchCV",
             HalvingGridSearchCV(base, grid, cv=folds, factor=3, random_state=0, n_jobs=1))
        )
        searches.append((type(ours).__name__, ours.set_params(cv=folds)))
        reference = None
        for label, search in searches:
            started = time.perf_counter()
            search.fit(X, y)
            seconds = time.perf_counter() - started
            reference = reference or seconds
            choice = ", ".join(f"{k} {v:.4g}" for k, v in sorted(search.best_params_.items()))
            if hasattr(search, "best_budget_"):
                choice += f", B {search.best_budget_}"
            test = scale * search.score(Xt, yt)
            row = (
                f"| {name} | {X.shape[0]:,} | {label} | {seconds:.1f} | {seconds / reference:.2f} "
                f"| {choice} | {scale * search.best_score_:.4g} | {test:.4g} |"
            )
            print(row, flush=True)
            lines.append(row)
    lines += [
        "",
        "CV and test: accuracy (%) on the classification sets, R^2 on fried and puma8nh. Where",
        "GridSearchCV did not run (more rows than --grid-rows), the ratio is to",
        "HalvingGridSearchCV.",
    ]
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
