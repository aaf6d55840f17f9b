"""Where BudgetSVR's R^2 goes against Nystroem + Ridge: the basis or the loss (issue 35, item 2).

On the regression check's sets (SETTINGS.md: 80/20 split seed 0, at most 40,000 training rows, X
and y standardised with the training rows' statistics; C = 10, gamma = 1 / n_features, epsilon =
0.1; fried: gamma = 0.1), at B = 500 and 1,000, one fit each of:

- BudgetSVR (BSCA, 5 epochs, seed 0): the budgeted pass chooses the basis, the polish solves the
  coefficients (squared epsilon-insensitive loss over span(S));
- the same polish on B random training rows (seeds 0-2, mean): the basis Nystroem uses, BudgetSVR's
  loss;
- the same on random rows with epsilon = 0 (squared loss: Ridge's, with 1/2 beta^T K_SS beta for
  its penalty);
- Nystroem(B) + Ridge(alpha = 1 / (2C)) (seeds 0-2, mean), the check's reference.

Each polished column also gives the polish's final objective (the SVR over span(S) the user
posed: lower is the better basis for that problem). A second table sweeps C on puma8nh: the
exact SVR, BudgetSVR and Nystroem + Ridge at each C (where the first table's C = 10 overfits).

The polish on a given basis goes through the estimator's private ``_polish_native`` (the public
``polish_coef`` keeps the fitted support vectors).

    python benchmarks/regression_basis.py --out docs/regression_basis.md   # about 5 minutes
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import regression_set  # noqa: E402
from _report import header, publish  # noqa: E402

SETS = ["puma8nh", "lowbwt", "mv", "fried"]
SEEDS = (0, 1, 2)


def polished_on(basis, X, y, C, gamma, epsilon):
    """A BudgetSVR whose support vectors are `basis`, its coefficients polished on (X, y)."""
    from budgetsvm import BudgetSVR
    from budgetsvm._validation import to_native

    reg = BudgetSVR(C=C, gamma=gamma, epsilon=epsilon, budget=len(basis), polish=False)
    reg.fit(X[:20], y[:20])
    reg.support_vectors_ = np.ascontiguousarray(basis)
    reg.dual_coef_ = np.zeros((1, len(basis)))
    reg.intercept_ = np.array([float(y.mean())])
    reg._polish_native(to_native(X), np.ascontiguousarray(y), 0, None, C)
    return reg


def timed(f, *args, **kwargs):
    start = time.perf_counter()
    out = f(*args, **kwargs)
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=SETS, choices=SETS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import budgetsvm
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score
    from sklearn.pipeline import make_pipeline

    warnings.filterwarnings("ignore")
    C, eps = 10.0, 0.1
    lines = header(
        "Regression basis: BudgetSVR's support vectors or random rows, its loss or Ridge's",
        "start",
    ) + [
        "Test R^2 (fit seconds) [the polish's final objective]. What each column runs: the "
        "docstring of `benchmarks/regression_basis.py`; random rows and Nystroem: the mean over "
        "seeds 0-2.",
        "",
        "| data (train rows) | B | BudgetSVR | random rows + polish | random rows + polish, "
        "epsilon 0 | Nystroem + Ridge |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for name in args.sets:
        X, Xt, y, yt, gamma = regression_set(name)
        for B in (500, 1000):
            cells = []
            budgeted = budgetsvm.BudgetSVR(
                C=C, gamma=gamma, epsilon=eps, budget=B, epochs=5, random_state=0
            )
            model, seconds = timed(budgeted.fit, X, y)
            cells.append(
                f"{r2_score(yt, model.predict(Xt)):.4f} ({seconds:.1f}) "
                f"[{polish_objective(model):,.0f}]"
            )
            for epsilon in (eps, 0.0):
                runs = []
                for seed in SEEDS:
                    rows = np.random.default_rng(seed).choice(len(y), B, replace=False)
                    model, seconds = timed(polished_on, X[rows], X, y, C, gamma, epsilon)
                    runs.append((r2_score(yt, model.predict(Xt)), seconds, polish_objective(model)))
                cells.append(
                    f"{np.mean([r[0] for r in runs]):.4f} ({np.mean([r[1] for r in runs]):.1f})"
                    + (f" [{np.mean([r[2] for r in runs]):,.0f}]" if epsilon == eps else "")
                )
            runs = []
            for seed in SEEDS:
                pipe = make_pipeline(
                    Nystroem(gamma=gamma, n_components=B, random_state=seed), Ridge(alpha=1 / (2 * C))
                )
                model, seconds = timed(pipe.fit, X, y)
                runs.append((r2_score(yt, model.predict(Xt)), seconds))
            cells.append(f"{np.mean([r for r, _ in runs]):.4f} ({np.mean([s for _, s in runs]):.1f})")
            lines.append(f"| {name} ({len(y):,}) | {B} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    if "puma8nh" in args.sets:
        lines += c_sweep(C_SWEEP, eps)
    publish(lines, args.out)


C_SWEEP = (0.3, 1.0, 3.0, 10.0)


def c_sweep(values, eps):
    """puma8nh's table over C: the exact SVR, BudgetSVR (seed 0) and Nystroem + Ridge (seeds 0-2)."""
    import budgetsvm
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score
    from sklearn.pipeline import make_pipeline

    X, Xt, y, yt, gamma = regression_set("puma8nh")
    lines = [
        "",
        "puma8nh's test R^2 over C (gamma and epsilon as above): where the exact SVR is best, and "
        "BudgetSVR against Nystroem + Ridge (alpha = 1 / (2C)) there.",
        "",
        "| C | KernelSVR | BudgetSVR B = 500 | Nystroem 500 | BudgetSVR B = 1,000 | Nystroem 1,000 |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    r2 = lambda m: r2_score(yt, m.predict(Xt))  # noqa: E731
    for C in values:
        cells = [f"{r2(budgetsvm.KernelSVR(C=C, gamma=gamma, epsilon=eps).fit(X, y)):.4f}"]
        for B in (500, 1000):
            budgeted = budgetsvm.BudgetSVR(
                C=C, gamma=gamma, epsilon=eps, budget=B, epochs=5, random_state=0
            ).fit(X, y)
            ny = [
                r2(
                    make_pipeline(
                        Nystroem(gamma=gamma, n_components=B, random_state=seed),
                        Ridge(alpha=1 / (2 * C)),
                    ).fit(X, y)
                )
                for seed in SEEDS
            ]
            cells += [f"{r2(budgeted):.4f}", f"{np.mean(ny):.4f}"]
        lines.append(f"| {C:g} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return lines


def polish_objective(model) -> float:
    """The polish's last objective value (1/2 beta^T K_SS beta + C times the loss)."""
    return float(model.fit_stats_["polish"]["objective"][-1])


if __name__ == "__main__":
    main()
