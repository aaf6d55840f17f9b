"""BudgetSVCCV and BudgetSVRCV: GridSearchCV's search where the budget is fixed, the halving
rounds' budgets, the last round's budget search (the folds kept apart), the refit; and
scikit-learn's estimator checks for every cross-validated estimator."""

from __future__ import annotations

import pickle

import budgetsvm
import numpy as np
import pytest
from budgetsvm import (
    BudgetSVC,
    BudgetSVCCV,
    BudgetSVR,
    BudgetSVRCV,
    KernelNuSVC,
    KernelNuSVCCV,
    KernelNuSVR,
    KernelNuSVRCV,
    KernelSVC,
    KernelSVCCV,
    KernelSVRCV,
    _budget_search,
    load_model,
)
from budgetsvm.budget_cv import ROUND_ROWS_PER_SV
from conftest import classification, scaled_regression
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold, cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks

RUN = dict(epochs=1, random_state=0)


@pytest.mark.parametrize("k", [2, 3])
def test_a_fixed_budget_grid_is_grid_search_cvs(k):
    X, y = classification(600, k)
    folds = StratifiedKFold(3, shuffle=True, random_state=0)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    grid = {"C": [0.5, 4.0], "gamma": [0.05, "scale"]}
    reference = GridSearchCV(BudgetSVC(budget=40, **RUN), grid, cv=folds).fit(
        X, y, sample_weight=weights
    )
    cv = BudgetSVCCV(
        Cs=grid["C"], gammas=grid["gamma"], budgets=40, cv=folds, search="grid", **RUN
    ).fit(X, y, sample_weight=weights)
    for key in reference.cv_results_:
        if "time" in key:
            continue
        ours, theirs = cv.cv_results_[key], reference.cv_results_[key]
        if key == "params" or key.startswith("param_"):
            assert list(ours) == list(theirs)
        else:
            assert_allclose(ours, theirs, err_msg=key)
    assert cv.best_params_ == reference.best_params_
    assert cv.best_score_ == pytest.approx(reference.best_score_)
    assert_array_equal(cv.cv_results_["budget"], 40)
    assert cv.best_budget_ == 40 and cv.budget_ == 40
    assert_allclose(cv.decision_function(X), reference.best_estimator_.decision_function(X))


GRIDS = dict(
    Cs=st.lists(st.sampled_from([0.1, 0.5, 2.0, 8.0, 32.0]), min_size=1, max_size=3, unique=True),
    gammas=st.lists(
        st.sampled_from([0.02, 0.1, 0.5, "scale"]), min_size=1, max_size=2, unique=True
    ),
    n_folds=st.integers(2, 4),
    k=st.integers(2, 3),
    seed=st.integers(0, 2**16),
)


@given(**GRIDS)
def test_any_grid_and_folds_score_as_grid_search_cv(Cs, gammas, n_folds, k, seed):
    # Cs in any order (the exact search solves them increasing along a path, then puts each
    # score back at its point), any folds, two or three classes.
    X, y = classification(150, k, seed)
    folds = list(StratifiedKFold(n_folds, shuffle=True, random_state=seed).split(X, y))
    grid = {"C": Cs, "gamma": gammas}
    exact = GridSearchCV(KernelSVC(tol=1e-6), grid, cv=folds).fit(X, y)
    ours = KernelSVCCV(Cs=Cs, gammas=gammas, cv=folds, tol=1e-6, search="grid").fit(X, y)
    assert ours.cv_results_["params"] == exact.cv_results_["params"]
    # Solved to 1e-6 both: at most a validation row apart.
    one_row = 1.5 / min(len(test) for _, test in folds)
    for j in range(n_folds):
        key = f"split{j}_test_score"
        assert_allclose(ours.cv_results_[key], exact.cv_results_[key], atol=one_row)
    budgeted = GridSearchCV(BudgetSVC(budget=20, **RUN), grid, cv=folds).fit(X, y)
    ours = BudgetSVCCV(Cs=Cs, gammas=gammas, budgets=20, cv=folds, search="grid", **RUN).fit(X, y)
    # The same fits (seeded): the same scores, choice and refitted model.
    assert_allclose(ours.cv_results_["mean_test_score"], budgeted.cv_results_["mean_test_score"])
    assert ours.best_params_ == budgeted.best_params_
    assert_allclose(ours.decision_function(X), budgeted.decision_function(X))


@pytest.mark.parametrize("k", [2, 3])
def test_the_nu_searches_are_grid_search_cvs(k):
    X, y = classification(300, k)
    folds = StratifiedKFold(3, shuffle=True, random_state=0)
    grid = {"gamma": [0.1, 0.5], "nu": [0.2, 0.4]}
    reference = GridSearchCV(KernelNuSVC(tol=1e-6), grid, cv=folds).fit(X, y)
    cv = KernelNuSVCCV(nus=grid["nu"], gammas=grid["gamma"], cv=folds, tol=1e-6, search="grid")
    cv.fit(X, y)
    assert cv.cv_results_["params"] == reference.cv_results_["params"]
    assert_allclose(cv.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"])
    assert cv.best_params_ == reference.best_params_
    assert_array_equal(cv.predict(X), reference.predict(X))
    with pytest.raises(ValueError, match="nu-SVC has no C"):
        KernelNuSVCCV(Cs=[1.0], cv=3).fit(X, y)
    X, y = scaled_regression(300)
    folds = KFold(3, shuffle=True, random_state=0)
    grid = {"C": [1.0, 4.0], "gamma": [0.1], "nu": [0.2, 0.5]}
    reference = GridSearchCV(KernelNuSVR(tol=1e-6), grid, cv=folds).fit(X, y)
    cv = KernelNuSVRCV(
        Cs=grid["C"], gammas=grid["gamma"], nus=grid["nu"], cv=folds, tol=1e-6, search="grid"
    ).fit(X, y)
    assert_allclose(cv.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"])
    assert cv.best_params_ == reference.best_params_


def test_the_regression_search_with_epsilons():
    X, y = scaled_regression(500)
    folds = KFold(3, shuffle=True, random_state=0)
    grid = {"C": [0.3, 3.0], "epsilon": [0.05, 0.3], "gamma": [0.05, 0.2]}
    reference = GridSearchCV(BudgetSVR(budget=30, random_state=0), grid, cv=folds).fit(X, y)
    cv = BudgetSVRCV(
        Cs=grid["C"],
        gammas=grid["gamma"],
        epsilons=grid["epsilon"],
        budgets=30,
        cv=folds,
        search="grid",
        random_state=0,
    ).fit(X, y)
    assert_allclose(cv.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"])
    assert cv.best_params_ == reference.best_params_
    assert_allclose(cv.predict(X), reference.predict(X))


def test_halving_rounds_grow_the_budget_with_the_rows():
    X, y = classification(6000, 2, 2)
    cv = BudgetSVCCV(
        Cs=[0.5, 2.0, 8.0], gammas=[0.05, 0.2, 0.8], budgets=100, cv=3, search="halving", **RUN
    ).fit(X, y)
    assert cv.n_candidates_ == [9, 3, 1]
    rows = cv.cv_results_["n_resources"]
    expected = np.minimum(np.maximum(rows // ROUND_ROWS_PER_SV, 50), 100)
    expected[cv.cv_results_["iter"] == 2] = 100  # the last round at the budget given
    assert_array_equal(cv.cv_results_["budget"], expected)
    assert cv.best_estimator_.budget == 100


def test_the_budget_search_cross_validates_each_step_on_its_folds():
    X, y = classification(4000, 2, 1)
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    cv = BudgetSVCCV(Cs=[2.0], gammas=[0.1], cv=folds, search="grid", **RUN).fit(X, y)
    steps = cv.budget_search_[0]
    assert steps[0]["budget"] == _budget_search.START
    assert cv.best_budget_ == max(steps, key=lambda s: s["mean_test_score"])["budget"]
    for step in steps:
        # Each step is a cross-validation of that budget, every fold's model on its own
        # training rows alone (scikit-learn's cross_val_score says what that gives).
        model = BudgetSVC(
            C=2.0,
            gamma=0.1,
            budget=step["budget"],
            polish_tol=_budget_search.STEP_POLISH_TOL,
            **RUN,
        )
        scores = cross_val_score(model, X, y, cv=folds)
        assert step["mean_test_score"] == pytest.approx(scores.mean())
    best = max(steps, key=lambda s: s["mean_test_score"])
    assert cv.best_score_ == pytest.approx(best["mean_test_score"])
    assert cv.cv_results_["budget"][0] == cv.best_budget_
    # The refit: the best point at its budget, on all rows, with the estimator's own tolerance.
    refit = BudgetSVC(C=2.0, gamma=0.1, budget=cv.best_budget_, **RUN).fit(X, y)
    assert_allclose(cv.decision_function(X), refit.decision_function(X))


def test_no_validation_row_reaches_its_folds_fits(monkeypatch):
    # Row ids in the first feature: every fit of the search sees only its fold's training rows.
    X, y = classification(900, 2, 5)
    X[:, 0] = np.arange(len(y))
    seen = []
    fit = BudgetSVC.fit

    def recording(self, X_fit, *args, **kwargs):
        seen.append(frozenset(np.asarray(X_fit)[:, 0].astype(int).tolist()))
        return fit(self, X_fit, *args, **kwargs)

    monkeypatch.setattr(BudgetSVC, "fit", recording)
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    BudgetSVCCV(Cs=[1.0, 4.0], gammas=[0.1], cv=folds, search="halving", **RUN).fit(X, y)
    *searched, refit = seen
    assert refit == frozenset(range(len(y)))
    trains = [frozenset(train.tolist()) for train, _ in folds]
    for rows in searched:
        fold = next(k for k, train in enumerate(trains) if rows <= train)
        assert not rows & frozenset(folds[fold][1].tolist())


def test_probability_refit_pickles_saves_and_loads(tmp_path):
    X, y = classification(900, 3, 6)
    cv = BudgetSVCCV(Cs=[1.0], gammas=[0.2], cv=3, probability=True, **RUN).fit(X, y)
    assert cv.best_estimator_.probability
    assert cv.predict_proba(X[:4]).shape == (4, 3)
    again = pickle.loads(pickle.dumps(cv))
    assert_array_equal(again.predict(X), cv.predict(X))
    path = tmp_path / "best.zip"
    cv.save(path)
    loaded = load_model(path)
    assert isinstance(loaded, BudgetSVC) and loaded.budget == cv.best_budget_
    assert_array_equal(loaded.predict(X), cv.predict(X))


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(budgets="big"), "budgets"),
        (dict(budgets=1), "budgets"),
        (dict(lam=0.01), "lam"),
        (dict(Cs=[]), "Cs"),
        (dict(gammas=[-1.0]), "gammas"),
        (dict(search="random"), "search"),
        (dict(epochs=0), "epochs"),
    ],
)
def test_bad_parameters_are_named(params, match):
    X, y = classification(120, 2)
    with pytest.raises(ValueError, match=match):
        BudgetSVCCV(cv=3, **params).fit(X, y)


SMALL = dict(Cs=[1.0, 4.0], gammas=["scale"], cv=3)


@parametrize_with_checks(
    [
        KernelSVCCV(**SMALL),
        KernelSVRCV(**SMALL),
        KernelNuSVCCV(nus=[0.1, 0.2], gammas=["scale"], cv=3),
        KernelNuSVRCV(**SMALL, nus=[0.1, 0.2]),
        BudgetSVCCV(**SMALL, budgets=30, random_state=0),
        BudgetSVCCV(**SMALL, random_state=0),
        BudgetSVRCV(**SMALL, budgets=30, random_state=0),
    ],
    expected_failed_checks=lambda est: {
        "check_sample_weight_equivalence_on_dense_data": "weights equal repetition only at "
        "the optimum, and repeated rows change the folds",
        "check_sample_weight_equivalence_on_sparse_data": "weights equal repetition only at "
        "the optimum, and repeated rows change the folds",
        **(
            {"check_class_weight_classifiers": "class_weight is ignored, as in NuSVC"}
            if isinstance(est, KernelNuSVCCV)
            else {}
        ),
    },
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_cv_estimators_are_exported():
    for name in ("BudgetSVCCV", "BudgetSVRCV", "KernelNuSVCCV", "KernelNuSVRCV"):
        assert name in budgetsvm.__all__ and getattr(budgetsvm, name).__name__ == name
