"""``budget="auto"``: the budget chosen by growing it while a held-out part of the training rows
says it still pays (BudgetSVC, BudgetSVR).

The budget buys accuracy with time: every doubling costs a little more than twice the fit and
gains less than the doubling before (docs/model_selection.md has the figures). So the search fits
budgets 250, 500, 1,000, ... on the rows outside a held-out part and scores each there; from the
last gains (up to ``GAINS_USED``) it predicts where one more doubling would gain less than
``GAIN_TOL`` (the gains shrink by about half per doubling, ``GAIN_RATIO``) and stops there:

- where the last doubling gained less than ``GAIN_TOL``, the best budget fitted so far is kept
  (the step past the knee is already paid; a smaller budget predicts faster);
- where the predicted budget lies between the last one and its double, a last fit at that
  budget on every row (held-out ones too: nothing is left to choose) is the model;
- below the last budget's ``KEEP_SHARE``, the last fit is kept;
- otherwise the budget doubles.

A kept fit is the one on the rows outside the held-out part (at most ``HELD_OUT_MOST`` rows, a
tenth of smaller data): refitting it on every row would cost as much again. The steps before
the last polish to ``STEP_POLISH_TOL`` (as accurate on held-out rows, and faster). No budget
exceeds the rows it is fitted on (beyond that nothing is merged: the budget is not binding).
docs/model_selection.md has the measurements.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from sklearn.base import clone

#: The first budget fitted.
START = 250
#: The least held-out gain (accuracy, or R^2, as ``score`` gives it) one more doubling of the
#: budget must promise: a quarter point of accuracy.
GAIN_TOL = 0.0025
#: The held-out part: a tenth of the rows, at most this many (a score's noise falls as one over
#: its square root; 20,000 rows measure a gain of 0.15 points of accuracy to about 0.1).
HELD_OUT_SHARE = 0.1
HELD_OUT_MOST = 20_000
#: Data with fewer rows than this outside the held-out part is fitted once, every row a
#: possible support vector (its budget the rows: no merging).
LADDER_ROWS = 2 * START
#: How much smaller each doubling's gain is than the one before, assumed (the ratios measured
#: on hard10d: docs/model_selection.md). Measured from noisy scores it swung the predicted
#: budget widely between two held-out parts of the same rows; the last ``GAINS_USED`` gains,
#: each carried to the last budget by this ratio, average out the noise instead.
GAIN_RATIO = 0.5
GAINS_USED = 3
#: A predicted budget below this share above the last fitted one keeps the last fit.
KEEP_SHARE = 1.2
#: The polish tolerance of the steps before the last (at least the estimator's own).
STEP_POLISH_TOL = 1e-3


def held_out_rows(y: np.ndarray, classify: bool, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """(training rows, held-out rows), the held-out ones a tenth (at most ``HELD_OUT_MOST``),
    stratified by class for classifiers (a class of one row stays in the training rows)."""
    n = len(y)
    share = min(HELD_OUT_SHARE, HELD_OUT_MOST / n)
    rng = np.random.default_rng(seed)
    if not classify:
        order = rng.permutation(n)
        k = int(n * share)
        return np.sort(order[k:]), np.sort(order[:k])
    held = []
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        held.append(members[: min(int(len(members) * share), len(members) - 1)])
    held_rows = np.sort(np.concatenate(held))
    mask = np.ones(n, dtype=bool)
    mask[held_rows] = False
    return np.flatnonzero(mask), held_rows


def predicted_budget(budgets: List[int], gains: List[float]) -> float:
    """The budget where one more doubling is predicted to gain ``GAIN_TOL``: each gain is the
    rate at its two budgets' geometric mean, and the rate shrinks by ``GAIN_RATIO`` per
    doubling (all ``gains`` are positive: the search stops at one below ``GAIN_TOL``)."""
    recent = gains[-GAINS_USED:]
    carried = [g * GAIN_RATIO ** (len(recent) - 1 - k) for k, g in enumerate(recent)]
    gain = math.exp(sum(math.log(g) for g in carried) / len(carried))
    rate_at = math.sqrt(budgets[-2] * budgets[-1])
    return rate_at * 2.0 ** (math.log(GAIN_TOL / gain) / math.log(GAIN_RATIO))


def next_budget(budgets: List[int], scores: List[float], most: int) -> Optional[Tuple[int, bool]]:
    """What follows the steps ``budgets`` that scored ``scores``: None to stop (keep the best
    score; the first of equal ones, the smaller budget), or the next budget and whether it is
    the last step (the predicted budget, below twice the last one). No budget exceeds ``most``
    (the rows fitted on: beyond them nothing is merged)."""
    budget = budgets[-1]
    gains = [b - a for a, b in zip(scores, scores[1:])]
    if budget >= most or (gains and gains[-1] < GAIN_TOL):
        return None
    if not gains:
        return min(2 * budget, most), False
    target = predicted_budget(budgets, gains)
    if target < KEEP_SHARE * budget:
        return None  # the last step scored best: every gain so far reached GAIN_TOL
    if target < 2 * budget:
        return int(round(min(target, most))), True
    return min(2 * budget, most), False


def search_budget(
    estimator: Any,
    X: Any,
    y: np.ndarray,
    sample_weight: Optional[np.ndarray],
    seed: int,
    classify: bool,
    fit_params: Dict[str, Any],
) -> Tuple[Any, Dict[str, Any]]:
    """The fitted model of the budget chosen for ``estimator`` (whose ``budget`` is 'auto') on
    validated rows X, y (labels as given for classifiers), and the search's record for
    ``fit_stats_['budget_search']``."""
    n = X.shape[0]
    template = clone(estimator).set_params(random_state=seed)
    started = time.perf_counter()
    train, held = held_out_rows(y, classify, seed)
    steps: List[Dict[str, Any]] = []
    if len(train) < LADDER_ROWS or len(held) == 0:
        chosen = _step(steps, template, min(n, START), X, y, sample_weight, fit_params)
        return chosen, _record(steps, 0, 0, started)
    X_train, y_train = X[train], y[train]
    w_train = None if sample_weight is None else sample_weight[train]
    X_held, y_held = X[held], y[held]
    w_held = None if sample_weight is None else sample_weight[held]
    wants_probability = bool(template.get_params().get("probability", False))
    step_template = clone(template).set_params(
        polish_tol=max(float(estimator.polish_tol), STEP_POLISH_TOL),
        verbose=False,
        **({"probability": False} if wants_probability else {}),
    )
    models: List[Any] = []
    budget = START
    while True:
        model = _step(steps, step_template, budget, X_train, y_train, w_train, fit_params)
        score = float(model.score(X_held, y_held, sample_weight=w_held))
        steps[-1]["held_out_score"] = score
        models.append(model)
        if estimator.verbose:
            print(
                f"[budgetsvm] budget {budget}: held-out score {score:.5f} "
                f"({steps[-1]['seconds']:.2f} s)",
                flush=True,
            )
        decision = next_budget(
            [s["budget"] for s in steps], [s["held_out_score"] for s in steps], len(train)
        )
        if decision is None:
            kept = int(np.argmax([s["held_out_score"] for s in steps]))
            break
        budget, last = decision
        if last:
            # The last step: every row, the estimator's own polish tolerance.
            chosen = _step(steps, template, budget, X, y, sample_weight, fit_params)
            return chosen, _record(steps, len(steps) - 1, len(held), started)
    if wants_probability:
        # The steps fitted no probabilities: the kept budget again, with them, on every row.
        chosen = _step(steps, template, steps[kept]["budget"], X, y, sample_weight, fit_params)
        return chosen, _record(steps, len(steps) - 1, len(held), started)
    return models[kept], _record(steps, kept, len(held), started)


def _step(
    steps: List[Dict[str, Any]],
    template: Any,
    budget: int,
    X: Any,
    y: Any,
    w: Any,
    fit_params: Dict[str, Any],
) -> Any:
    """One fit of the search at ``budget``, recorded in ``steps``."""
    t = time.perf_counter()
    model = clone(template).set_params(budget=int(max(budget, 2)))
    model.fit(X, y, sample_weight=w, **fit_params)
    steps.append(
        {
            "budget": int(max(budget, 2)),
            "rows": int(X.shape[0]),
            "held_out_score": None,
            "seconds": time.perf_counter() - t,
        }
    )
    return model


def _record(
    steps: List[Dict[str, Any]], kept: int, held_out_rows: int, started: float
) -> Dict[str, Any]:
    """``fit_stats_['budget_search']``: the steps (step ``kept`` the model's), its budget, the
    held-out rows and the time in all."""
    for i, step in enumerate(steps):
        step["kept"] = i == kept
    return {
        "budget": steps[kept]["budget"],
        "steps": steps,
        "held_out_rows": held_out_rows,
        "seconds": time.perf_counter() - started,
    }
