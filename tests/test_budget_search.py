"""budget='auto' (``budgetsvm._budget_search``): the held-out split, the predicted budget, the
ladder's decisions on known score curves, and the real estimators' searches (the kept model is
a fit on the training rows alone; the last step a fit on every row)."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, ClassVar, List, Tuple

import numpy as np
import pytest
from budgetsvm import BudgetSVC, BudgetSVR, load_model
from budgetsvm import _budget_search as search
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import BaseEstimator
from sklearn.datasets import make_classification, make_regression


@given(
    counts=st.lists(st.integers(1, 400), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
    classify=st.booleans(),
)
def test_held_out_rows_split_every_row_once_stratified(counts, seed, classify):
    y = np.repeat(np.arange(len(counts)), counts)[
        np.random.default_rng(seed).permutation(sum(counts))
    ]
    train, held = search.held_out_rows(y, classify, seed)
    assert_array_equal(np.sort(np.concatenate([train, held])), np.arange(len(y)))
    assert len(held) <= min(search.HELD_OUT_SHARE * len(y), search.HELD_OUT_MOST)
    if classify:
        for label, count in enumerate(counts):
            kept_out = np.count_nonzero(y[held] == label)
            assert kept_out == min(
                int(count * min(search.HELD_OUT_SHARE, search.HELD_OUT_MOST / len(y))), count - 1
            )
            assert np.count_nonzero(y[train] == label) >= 1


def test_held_out_rows_at_most_held_out_most():
    y = np.zeros(250_000)
    train, held = search.held_out_rows(y, False, 0)
    assert len(held) == search.HELD_OUT_MOST
    assert len(train) == 250_000 - search.HELD_OUT_MOST


@given(
    last=st.floats(0.003, 0.05),
    doublings=st.integers(1, 3),
    start=st.sampled_from([250, 300, 1000]),
)
def test_predicted_budget_where_the_halving_gains_reach_the_tolerance(last, doublings, start):
    # Gains that halve exactly per doubling: every one predicts the same rate.
    gains = [last / search.GAIN_RATIO ** (doublings - 1 - k) for k in range(doublings)]
    budgets = [start * 2**k for k in range(doublings + 1)]
    predicted = search.predicted_budget(budgets, gains)
    # Independently: bisection on the rate extrapolated from the last gain at its midpoint.
    mid = math.sqrt(budgets[-2] * budgets[-1])

    def rate(b: float) -> float:
        return last * search.GAIN_RATIO ** math.log2(b / mid)

    lo, hi = 1.0, 1e9
    for _ in range(200):
        m = math.sqrt(lo * hi)
        lo, hi = (m, hi) if rate(m) > search.GAIN_TOL else (lo, m)
    assert predicted == pytest.approx(lo, rel=1e-9)


def test_predicted_budget_averages_noisy_gains():
    # 0.02 then 0.002 (a noisy low last gain) predict as their carried mean, not the last alone.
    budgets = [250, 500, 1000]
    both = search.predicted_budget(budgets, [0.02, 0.002])
    mean = math.sqrt(0.02 * search.GAIN_RATIO * 0.002)
    assert both == pytest.approx(search.predicted_budget(budgets, [mean]), rel=1e-12)


@dataclass(kw_only=True, eq=False, repr=False)
class CurveModel(BaseEstimator):
    """A stand-in estimator whose held-out score is a known function of its budget; it records
    every fit (budget, rows, probability, polish_tol)."""

    budget: Any = 100
    curve: str = "halving"
    polish_tol: float = 1e-5
    probability: bool = False
    random_state: Any = None
    verbose: bool = False
    fits: ClassVar[List[Tuple[int, int, bool, float]]] = []

    def fit(self, X, y, sample_weight=None):
        CurveModel.fits.append((int(self.budget), X.shape[0], self.probability, self.polish_tol))
        self.fitted_budget_ = int(self.budget)
        return self

    def score(self, X, y, sample_weight=None):
        b = self.fitted_budget_
        if self.curve == "halving":  # each doubling gains half the last: the knee at 3,000
            return 1.0 - search.GAIN_TOL * math.sqrt(2.0) * 3000.0 / b
        if self.curve == "flat":
            return 0.9
        if self.curve == "steep":  # gains 0.05 per doubling, forever
            return 0.05 * math.log2(b)
        raise AssertionError(self.curve)


def run_curve(curve, n=50_000, probability=False):
    CurveModel.fits = []
    X, y = np.zeros((n, 1)), np.arange(n) % 2
    model, record = search.search_budget(
        CurveModel(curve=curve, probability=probability), X, y, None, 7, True, {}
    )
    return model, record, list(CurveModel.fits)


def test_the_ladder_ends_with_a_fit_on_every_row_at_the_predicted_budget():
    model, record, fits = run_curve("halving")
    n_train = 50_000 - 5_000
    assert [f[:2] for f in fits] == [
        (250, n_train),
        (500, n_train),
        (1000, n_train),
        (2000, n_train),
        (3000, 50_000),
    ]
    assert [f[3] for f in fits] == [search.STEP_POLISH_TOL] * 4 + [1e-5]
    assert model.fitted_budget_ == 3000 and record["budget"] == 3000
    assert [s["kept"] for s in record["steps"]] == [False] * 4 + [True]
    assert record["steps"][-1]["held_out_score"] is None
    assert record["held_out_rows"] == 5_000


def test_a_flat_curve_keeps_the_smaller_budget_fitted_on_the_training_rows():
    model, record, fits = run_curve("flat")
    assert [f[0] for f in fits] == [250, 500]
    assert model.fitted_budget_ == 250 and record["budget"] == 250
    assert record["steps"][0]["kept"] and not record["steps"][1]["kept"]


def test_a_curve_that_keeps_gaining_stops_at_the_training_rows():
    model, record, fits = run_curve("steep", n=6_000)
    assert [f[0] for f in fits] == [250, 500, 1000, 2000, 4000, 5400]
    assert record["budget"] == 5400


def test_probabilities_come_from_a_last_fit_on_every_row():
    model, record, fits = run_curve("flat", probability=True)
    assert [(f[0], f[1], f[2]) for f in fits] == [
        (250, 45_000, False),
        (500, 45_000, False),
        (250, 50_000, True),
    ]
    assert model.probability and record["budget"] == 250


def test_small_data_is_one_fit_on_every_row():
    model, record, fits = run_curve("halving", n=400)
    assert fits == [(250, 400, False, 1e-5)]
    assert record["steps"][0]["kept"] and record["held_out_rows"] == 0


def data(n=6000, seed=0):
    X, y = make_classification(n, 8, n_informative=5, flip_y=0.05, random_state=seed)
    return X, y


def test_budget_svc_keeps_a_fit_that_never_saw_the_held_out_rows():
    X, y = data()
    auto = BudgetSVC(budget="auto", epochs=1, random_state=3).fit(X, y)
    record = auto.fit_stats_["budget_search"]
    kept = next(s for s in record["steps"] if s["kept"])
    assert auto.budget_ == kept["budget"] == record["budget"]
    assert auto.support_vectors_.shape[0] <= auto.budget_
    train, held = search.held_out_rows(y, True, 3)
    assert kept["rows"] in (len(train), len(y))
    rows = train if kept["rows"] == len(train) else np.arange(len(y))
    tol = search.STEP_POLISH_TOL if kept["held_out_score"] is not None else 1e-5
    direct = BudgetSVC(budget=kept["budget"], epochs=1, random_state=3, polish_tol=tol).fit(
        X[rows], y[rows]
    )
    assert_array_equal(auto.support_vectors_, direct.support_vectors_)
    assert_allclose(auto.dual_coef_, direct.dual_coef_)
    assert_allclose(auto.decision_function(X), direct.decision_function(X))
    if kept["held_out_score"] is not None:
        assert kept["held_out_score"] == pytest.approx(direct.score(X[held], y[held]))


def test_budget_svr_search_and_its_record():
    X, y = make_regression(3000, 6, noise=5.0, random_state=0)
    y = y / y.std()
    auto = BudgetSVR(budget="auto", random_state=0).fit(X, y)
    steps = auto.fit_stats_["budget_search"]["steps"]
    assert steps[0]["budget"] == search.START and len(steps) >= 2
    assert sum(s["kept"] for s in steps) == 1
    assert all(s["seconds"] >= 0 for s in steps)
    assert auto.score(X, y) > 0.9


def test_zero_weights_leave_rows_out_of_the_search():
    X, y = data(3000)
    w = np.ones(len(y))
    w[::7] = 0.0
    given_w = w.copy()
    auto = BudgetSVC(budget="auto", epochs=1, random_state=0).fit(X, y, sample_weight=w)
    kept = w > 0
    without = BudgetSVC(budget="auto", epochs=1, random_state=0).fit(X[kept], y[kept])
    assert_array_equal(w, given_w)
    assert auto.budget_ == without.budget_
    assert_allclose(auto.decision_function(X), without.decision_function(X))


def test_multiclass_probability_and_model_files():
    X, y = make_classification(2400, 6, n_informative=4, n_redundant=0, n_classes=3, random_state=1)
    auto = BudgetSVC(budget="auto", epochs=1, probability=True, random_state=0).fit(X, y)
    assert auto.predict_proba(X[:5]).shape == (5, 3)
    last = auto.fit_stats_["budget_search"]["steps"][-1]
    assert last["kept"] and last["rows"] == len(y)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "auto.zip")
        auto.save(path)
        loaded = load_model(path)
    assert loaded.budget == "auto" and loaded.budget_ == auto.budget_
    assert_array_equal(loaded.predict(X), auto.predict(X))


def test_an_integer_budget_is_budget_():
    X, y = data(500)
    assert BudgetSVC(budget=30, epochs=1, random_state=0).fit(X, y).budget_ == 30
    assert BudgetSVR(budget=30, random_state=0).fit(X, y.astype(float)).budget_ == 30
    # Every way to a model says its budget: a stream, a file.
    assert BudgetSVC(budget=30).partial_fit(X, y, classes=np.unique(y)).budget_ == 30
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.svm")
        with open(path, "w") as f:
            for row, label in zip(X, y):
                f.write(f"{label} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(row)) + "\n")
        assert BudgetSVC(budget=30, epochs=1).fit_file(path).budget_ == 30


@pytest.mark.parametrize("budget", ["big", "Auto", 1, 2.5, None])
def test_bad_budgets_are_named(budget):
    X, y = data(200)
    with pytest.raises(ValueError, match="budget"):
        BudgetSVC(budget=budget).fit(X, y)


@pytest.mark.parametrize("cls", [BudgetSVC, BudgetSVR])
@pytest.mark.parametrize("method", ["partial_fit", "fit_file"])
def test_streaming_needs_an_integer_budget(cls, method):
    model = cls(budget="auto", solver="bsgd")
    assert not hasattr(model, method)
    with pytest.raises(AttributeError) as raised:
        getattr(model, method)
    assert "integer budget" in str(raised.value.__cause__)
    assert hasattr(cls(budget=50, solver="bsgd"), method)
