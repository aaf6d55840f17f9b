"""The budgeted SVMs with C and gamma (and epsilon) chosen by cross-validation, and their budget
with them: ``BudgetSVCCV`` and ``BudgetSVRCV``.

The search is ``KernelSVCCV``'s successive halving over rows (``budgetsvm._search_cv``) with a
budget that grows with each round's rows: a fit of B support vectors wants some tens of rows
per vector (its polish fits B coefficients), and a cheap round is what halving is for, so a
round before the last fits ``ROUND_ROWS_PER_SV`` rows per vector (hard10d's 200,000 rows:
budgets 250 and 740 on 14,800 and 44,400 rows a fold). The last round cross-validates the
points left on all of each fold's training rows; with ``budgets='auto'`` it grows the budget
as ``budget='auto'`` does (``budgetsvm._budget_search.next_budget``), each step's score the mean
of the folds' validation scores, starting from the round before's budget: the point's budget is
its best step, which then fits all rows (``refit``). Its validation rows choose among budgets
exactly as they choose among Cs: no fold's model sees its own validation rows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from sklearn.base import RegressorMixin, clone

from budgetsvm import _budget_search
from budgetsvm._budgeted import BudgetedRunParams
from budgetsvm._search_cv import (
    EpsilonSearch,
    FoldRows,
    LastRound,
    RoundResult,
    SearchClassifierMixin,
    SearchCV,
)
from budgetsvm._validation import check_choice, check_positive
from budgetsvm.budget_svc import BudgetSVC
from budgetsvm.budget_svr import BudgetSVR

__all__ = ["BudgetSVCCV", "BudgetSVRCV"]

#: Rows a fold per support vector in the rounds before the last (at least ``ROUND_BUDGET_MIN``
#: vectors).
ROUND_ROWS_PER_SV = 60
ROUND_BUDGET_MIN = 50


@dataclass(kw_only=True, eq=False, repr=False)
class _BudgetSearchCV(BudgetedRunParams, SearchCV):
    """What ``BudgetSVCCV`` and ``BudgetSVRCV`` share: the budget of each round, the last
    round's budget search, the refit at the budget chosen."""

    budgets: Any = "auto"

    def _estimator_params(self) -> Dict[str, Any]:
        names = [f.name for f in fields(BudgetedRunParams)] + ["n_jobs", "random_state"]
        return {name: getattr(self, name) for name in names}

    def _check_search_params(self) -> None:
        if isinstance(self.budgets, str):
            check_choice("budgets", self.budgets, ("auto",))
        else:
            check_positive("budgets", self.budgets, integer=True, minimum=2)
        if self.lam is not None:
            raise ValueError(
                "lam sets lambda whatever C is: a search over Cs needs lam=None (got "
                f"lam={self.lam!r})"
            )

    def _round_budget(self, rows: int) -> int:
        """The budget of a round whose folds train on ``rows`` rows: an integer ``budgets`` in
        the last round, else ``ROUND_ROWS_PER_SV`` rows a vector (never above ``budgets``)."""
        fixed = not isinstance(self.budgets, str)
        if fixed and rows >= self._last_rows:
            return int(self.budgets)
        budget = min(max(rows // ROUND_ROWS_PER_SV, ROUND_BUDGET_MIN), rows)
        return max(2, min(budget, self.budgets) if fixed else budget)

    def _round_started(self, rows: int) -> None:
        self._budget_of_rows[rows] = self._round_budget(rows)

    def _fit_members(
        self, template: Any, fixed: Dict[str, Any], Cs: List[float], fold: FoldRows
    ) -> List[Any]:
        budget = self._round_budget(fold.round_rows)
        return [
            clone(template)
            .set_params(**fixed, C=c, budget=budget)
            .fit(fold.X, fold.y, sample_weight=fold.weights)
            for c in Cs
        ]

    def _last_round(self, last: LastRound) -> Optional[RoundResult]:
        if not isinstance(self.budgets, str):
            return None
        earlier = [b for r, b in self._budget_of_rows.items() if r < last.rows]
        start = min(max([_budget_search.START] + earlier), last.rows)
        results = []
        for i in last.alive:
            steps = self._budget_ladder(last, last.candidates[i], start)
            best = steps[int(np.argmax([s["mean_test_score"] for s in steps]))]
            self._chosen_budgets[i] = best["budget"]
            self._ladders[i] = [
                {"budget": s["budget"], "mean_test_score": s["mean_test_score"]} for s in steps
            ]
            # The point's fit time a fold: its whole budget search's.
            results.append((i, best, np.sum([s["fit_times"] for s in steps], axis=0)))
        n_folds = len(results[0][1]["test_scores"])
        scores = np.full((len(last.candidates), n_folds), np.nan)
        fit_times, score_times = np.zeros_like(scores), np.zeros_like(scores)
        for i, best, seconds in results:
            scores[i], fit_times[i], score_times[i] = (
                best["test_scores"],
                seconds,
                best["score_times"],
            )
        return scores, fit_times, score_times

    def _budget_ladder(
        self, last: LastRound, point: Dict[str, Any], start: int
    ) -> List[Dict[str, Any]]:
        """``budget='auto'``'s steps (``_budget_search.next_budget``) for one point, each a
        cross-validation whose score is the mean over the folds."""
        tol = max(float(self.polish_tol), _budget_search.STEP_POLISH_TOL)
        steps: List[Dict[str, Any]] = []
        budget, final = start, False
        while True:
            scores, fit_times, score_times = last.cross_validate(
                point, {"budget": budget, "polish_tol": tol}
            )
            steps.append(
                {
                    "budget": budget,
                    "mean_test_score": float(np.mean(scores)),
                    "test_scores": scores,
                    "fit_times": fit_times,
                    "score_times": score_times,
                }
            )
            if self.verbose:
                print(
                    f"[budgetsvm] {point} at budget {budget}: mean score "
                    f"{steps[-1]['mean_test_score']:.5f} ({float(np.sum(fit_times)):.2f} s)",
                    flush=True,
                )
            if final:
                return steps
            decision = _budget_search.next_budget(
                [s["budget"] for s in steps], [s["mean_test_score"] for s in steps], last.rows
            )
            if decision is None:
                return steps
            budget, final = decision

    def _refit_params(self) -> Dict[str, Any]:
        return {"budget": self.best_budget_}

    def _before_search(self, n_train: int) -> None:
        self._last_rows = n_train
        self._budget_of_rows: Dict[int, int] = {}
        self._chosen_budgets: Dict[int, int] = {}
        self._ladders: Dict[int, List[Dict[str, Any]]] = {}

    def _after_search(self, entries: List[Tuple[int, int]]) -> None:
        """``best_budget_``, ``budget_search_`` and each entry's budget in ``cv_results_``
        (``entries``: each entry's candidate and training rows a fold)."""
        budgets = [
            self._chosen_budgets[i]
            if rows >= self._last_rows and i in self._chosen_budgets
            else self._budget_of_rows[rows]
            for i, rows in entries
        ]
        self.cv_results_["budget"] = np.asarray(budgets, dtype=np.int64)
        self.best_budget_ = int(budgets[self.best_index_])
        self.budget_search_ = {int(i): steps for i, steps in sorted(self._ladders.items())}


@dataclass(kw_only=True, eq=False, repr=False)
class BudgetSVCCV(SearchClassifierMixin, _BudgetSearchCV):
    """``BudgetSVC`` with C, gamma and the budget chosen by cross-validation.

    Searches the grid ``Cs`` x ``gammas`` as ``GridSearchCV(BudgetSVC(budget=...), ...)`` would,
    for a fraction of its time: the points compete on growing subsamples of each fold's
    training rows (successive halving, ``search``), each round at a budget of about 60 rows
    per support vector, and the points left are cross-validated on all rows, where
    ``budgets='auto'`` grows the budget as ``BudgetSVC(budget='auto')`` does, scored by the
    mean over the folds. The best point is then fitted at its budget on all rows (``refit``)
    and the estimator predicts with that model.

    Parameters
    ----------
    Cs : list of float, default=None
        The Cs searched (each finite and > 0); None: 0.25, 1, 4, 16, 64.
    gammas : list of {float, 'scale', 'auto'}, default=None
        The kernel widths searched; None: 1/4, 1 and 4 times gamma='scale' of the training
        rows.
    budgets : int or 'auto', default='auto'
        The budget of the last round and of the refit ('auto': chosen, as above; the rounds
        before the last take fewer support vectors, never more than this).
    cv, scoring, refit, n_jobs, verbose, search, random_state :
        As ``KernelSVCCV``'s (search 'grid': every point on all folds, at ``budgets``).
    solver, maintenance, merge, epochs, average, shuffle, dual_step, sv_storage :
        As ``BudgetSVC``'s, for every fit of the search and the refit.
    polish, polish_tol, polish_max_iter, polish_cache_size, class_weight, multiclass :
        As ``BudgetSVC``'s, for every fit of the search and the refit (the last round's budget
        steps polish to at least 1e-3, as ``budget='auto'``'s).
    lam : None
        Must be None: lambda = 1 / (n C) follows each C searched.
    probability : bool, default=False
        Fit ``BudgetSVC``'s probabilities in the refit (the search's fits have none).

    Attributes
    ----------
    cv_results_ : dict
        As ``KernelSVCCV``'s, with ``budget``: the budget of each entry's fits.
    best_params_, best_score_, best_index_, n_iterations_, n_candidates_, n_resources_ :
        As ``KernelSVCCV``'s (``best_params_`` holds C and gamma).
    best_budget_ : int
        The budget of the best point: the refit's.
    budget_search_ : dict
        With ``budgets='auto'``: for each point of the last round (its index in
        ``cv_results_['params']``' grid), the budgets it was cross-validated at and their mean
        scores.
    best_estimator_ : BudgetSVC
        The refitted model; its learned attributes read through this estimator.
    n_splits_, refit_time_, scorer_ :
        As GridSearchCV's.
    """

    class_weight: Any = None
    probability: bool = False
    multiclass: str = "auto"

    _estimator = BudgetSVC

    def _estimator_params(self) -> Dict[str, Any]:
        return {
            **super()._estimator_params(),
            "class_weight": self.class_weight,
            "multiclass": self.multiclass,
        }

    def _check_search_params(self) -> None:
        super()._check_search_params()
        check_choice("probability", self.probability, (True, False))

    def _refit_params(self) -> Dict[str, Any]:
        # The search's fits have no probabilities (each would cost a cross-validation).
        return {**super()._refit_params(), "probability": self.probability}


@dataclass(kw_only=True, eq=False, repr=False)
class BudgetSVRCV(RegressorMixin, EpsilonSearch, _BudgetSearchCV):
    """``BudgetSVR`` with C, gamma (and epsilon) and the budget chosen by cross-validation.

    ``BudgetSVCCV``'s search (see there) for ``BudgetSVR``: the grid ``Cs`` x ``gammas`` x
    ``epsilons``, scored by R^2 unless ``scoring`` says otherwise (the default 5 folds are plain
    k-fold).

    Parameters
    ----------
    Cs, gammas, budgets, cv, scoring, refit, n_jobs, verbose, search, random_state :
        As ``BudgetSVCCV``'s.
    solver, maintenance, merge, epochs, average, shuffle, dual_step, sv_storage :
        As ``BudgetSVR``'s (solver 'bsca', no averaging by default).
    polish, polish_tol, polish_max_iter, polish_cache_size, lam :
        As ``BudgetSVCCV``'s.
    epsilon, epsilons :
        As ``KernelSVRCV``'s: the widths searched, ``[epsilon]`` (0.1) when ``epsilons`` is
        None.

    Attributes
    ----------
    As ``BudgetSVCCV``'s; ``best_estimator_`` is a ``BudgetSVR``.
    """

    solver: str = "bsca"
    average: bool = False

    _estimator = BudgetSVR
