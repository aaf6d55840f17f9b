"""KernelSVCCV and KernelSVRCV: GridSearchCV's search (scores, choice, cv_results_) along C
paths, the folds kept apart, the refitted model behind the predictions, and bad input."""

from __future__ import annotations

import pickle

import budgetsvm
import numpy as np
import pytest
from budgetsvm import KernelSVC, KernelSVCCV, KernelSVR, KernelSVRCV, load_model
from conftest import classification, scaled_regression
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, StratifiedKFold


@pytest.mark.parametrize("k", [2, 3])
def test_the_search_is_grid_search_cvs(k):
    X, y = classification(450, k)
    folds = StratifiedKFold(3, shuffle=True, random_state=0)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    grid = {"C": [0.5, 4, 32], "gamma": [0.05, "scale", 0.5]}
    reference = GridSearchCV(KernelSVC(tol=1e-6), grid, cv=folds).fit(
        X, y, sample_weight=weights
    )
    cv = KernelSVCCV(
        Cs=grid["C"], gammas=grid["gamma"], cv=folds, tol=1e-6, search="grid"
    ).fit(X, y, sample_weight=weights)
    assert list(cv.cv_results_) == list(reference.cv_results_)
    assert cv.cv_results_["params"] == reference.cv_results_["params"]
    for key in ("param_C", "param_gamma"):
        assert list(cv.cv_results_[key]) == list(reference.cv_results_[key])
    for key in [f"split{j}_test_score" for j in range(3)] + ["mean_test_score"]:
        # Solved to 1e-6 both: at most one validation row apart.
        assert_allclose(cv.cv_results_[key], reference.cv_results_[key], atol=1.5 / len(y) * 3)
    assert cv.best_params_ == reference.best_params_
    assert cv.best_score_ == pytest.approx(reference.best_score_, abs=1.5 / len(y) * 3)
    assert cv.n_splits_ == 3
    assert_array_equal(cv.predict(X), reference.predict(X))
    assert_allclose(cv.decision_function(X), reference.decision_function(X), atol=1e-4)


def test_the_regression_search_is_grid_search_cvs_with_epsilons():
    X, y = scaled_regression(300)
    folds = KFold(3, shuffle=True, random_state=0)
    grid = {"C": [0.3, 3.0], "epsilon": [0.05, 0.3], "gamma": [0.05, 0.2]}
    reference = GridSearchCV(KernelSVR(tol=1e-6), grid, cv=folds).fit(X, y)
    cv = KernelSVRCV(
        Cs=grid["C"],
        gammas=grid["gamma"],
        epsilons=grid["epsilon"],
        cv=folds,
        tol=1e-6,
        search="grid",
    ).fit(X, y)
    assert cv.cv_results_["params"] == reference.cv_results_["params"]
    assert_allclose(cv.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"],
                    atol=1e-4)
    assert cv.best_params_ == reference.best_params_
    assert_allclose(cv.predict(X), reference.predict(X), atol=1e-3)
    # epsilon alone: one value, the estimator's.
    one = KernelSVRCV(Cs=[1.0], gammas=[0.1], epsilon=0.2, cv=folds).fit(X, y)
    assert one.best_params_ == {"C": 1.0, "epsilon": 0.2, "gamma": 0.1}


def test_no_validation_row_reaches_its_folds_fits(monkeypatch):
    # Row ids in the first feature: every native fit of the search sees exactly its fold's
    # training rows, the refit all rows.
    X, y = classification(300, 3)
    X[:, 0] = np.arange(len(y))
    seen = []
    fit_exact = budgetsvm._budgetsvm.fit_exact

    def recording(x, *args, **kwargs):
        seen.append(frozenset(np.asarray(x)[:, 0].astype(int).tolist()))
        return fit_exact(x, *args, **kwargs)

    monkeypatch.setattr(budgetsvm._budgetsvm, "fit_exact", recording)
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    KernelSVCCV(Cs=[1.0, 4.0], gammas=[0.1, 0.3], cv=folds, search="grid").fit(X, y)
    assert len(seen) == 3 * 2 + 1  # a path per fold and gamma, then the refit
    for k, (train, test) in enumerate(folds):
        for rows in seen[2 * k : 2 * k + 2]:
            assert rows == frozenset(train.tolist())
            assert not rows & frozenset(test.tolist())
    assert seen[-1] == frozenset(range(len(y)))


def test_defaults_group_splitters_and_scorings():
    X, y = classification(300, 3)
    cv = KernelSVCCV(cv=3).fit(X, y)
    assert len(cv.cv_results_["params"]) == len(budgetsvm.kernel_cv.DEFAULT_CS) * 3
    gammas = sorted({p["gamma"] for p in cv.cv_results_["params"]})
    scale = 1.0 / (X.shape[1] * X.var())
    assert_allclose(gammas, [scale / 4, scale, scale * 4])
    groups = np.arange(len(y)) % 5
    grouped = KernelSVCCV(Cs=[1.0], gammas=[0.2], cv=GroupKFold(5)).fit(X, y, groups=groups)
    assert grouped.n_splits_ == 5
    balanced = KernelSVCCV(Cs=[1.0, 8.0], gammas=[0.2], cv=3, scoring="balanced_accuracy")
    assert 0.5 < balanced.fit(X, y).best_score_ <= 1.0
    with pytest.raises(ValueError, match="no probabilities"):
        KernelSVCCV(Cs=[1.0], gammas=[0.2], cv=3, scoring="neg_log_loss").fit(X, y)


def test_refit_false_keeps_the_search_and_says_why_it_cannot_predict():
    X, y = classification(200, 3)
    cv = KernelSVCCV(Cs=[1.0, 2.0], gammas=[0.2], cv=3, refit=False).fit(X, y)
    assert set(cv.best_params_) == {"C", "gamma"}
    with pytest.raises(AttributeError, match="refit=False"):
        cv.predict(X)


def test_the_refitted_model_pickles_saves_and_loads(tmp_path):
    X, y = classification(240, 3)
    cv = KernelSVCCV(Cs=[1.0, 8.0], gammas=[0.2], cv=3, probability=True, random_state=0)
    cv.fit(X, y)
    assert cv.predict_proba(X).shape == (len(y), 3)
    assert_array_equal(pickle.loads(pickle.dumps(cv)).predict(X), cv.predict(X))
    cv.save(tmp_path / "m.zip")
    loaded = load_model(tmp_path / "m.zip")
    assert isinstance(loaded, KernelSVC)
    assert_array_equal(loaded.predict(X), cv.predict(X))
    # The refitted model's learned attributes read through the search.
    assert_array_equal(cv.support_vectors_, cv.best_estimator_.support_vectors_)
    assert cv.best_estimator_.C == cv.best_params_["C"]


@pytest.mark.parametrize(
    "params, match",
    [
        ({"Cs": []}, "Cs must hold at least one value"),
        ({"Cs": [1.0, 0.0]}, "C must be > 0"),
        ({"Cs": [1.0, float("inf")]}, "Cs must be finite"),
        ({"Cs": 3}, "Cs must be a list"),
        ({"gammas": ["wide"]}, "gammas"),
        ({"gammas": [-1.0]}, "gammas must be numbers > 0"),
        ({"kernel": "precomputed"}, "kernel"),
        ({"refit": "yes"}, "refit"),
        ({"tol": -1.0}, "tol"),
    ],
)
def test_bad_parameters_are_named(params, match):
    X, y = classification(120, 3)
    with pytest.raises(ValueError, match=match):
        KernelSVCCV(cv=3, **params).fit(X, y)


def test_bad_input_is_named():
    X, y = classification(120, 3)
    with pytest.raises(ValueError, match="sample_weight"):
        KernelSVCCV(cv=3).fit(X, y, sample_weight=np.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        KernelSVCCV(cv=3).fit(np.full_like(X, np.nan), y)
    with pytest.raises(ValueError, match="epsilon"):
        KernelSVRCV(cv=3, epsilons=[-0.1]).fit(*scaled_regression(60))


def test_halving_rounds_shrink_the_candidates_and_grow_the_rows():
    fractions = budgetsvm._search_cv._halving_fractions
    assert fractions(12, 100_000, "grid") == [1.0]
    assert fractions(12, 1_000, "auto") == [1.0]  # below HALVING_FROM_ROWS
    assert fractions(12, 30_000, "auto") == [1 / 27, 1 / 9, 1 / 3, 1.0]  # 12 -> 4 -> 2 -> 1
    assert fractions(12, 1_000, "halving") == [1 / 3, 1.0]  # each round >= 300 rows
    assert fractions(1, 30_000, "halving") == [1.0]


def test_halving_ends_with_the_grid_searchs_score_of_its_choice(monkeypatch):
    X, y = classification(3000, 2, 3)
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    grid = dict(Cs=[0.25, 1.0, 4.0, 16.0], gammas=[0.02, 0.1, 0.5], cv=folds, tol=1e-6)
    seen = []
    fit_exact = budgetsvm._budgetsvm.fit_exact

    def recording(x, *args, **kwargs):
        seen.append(np.asarray(x).copy())
        return fit_exact(x, *args, **kwargs)

    monkeypatch.setattr(budgetsvm._budgetsvm, "fit_exact", recording)
    halving = KernelSVCCV(search="halving", random_state=0, **grid).fit(X, y)
    monkeypatch.undo()
    results = halving.cv_results_
    # 2,000 training rows a fold: two rounds (a third of them is the fewest above 300).
    assert halving.n_candidates_ == [12, 4]
    assert halving.n_resources_ == [667, 2000]
    assert list(results["iter"]) == [0] * 12 + [1] * 4
    assert list(results["n_resources"]) == [667] * 12 + [2000] * 4
    last = results["mean_test_score"][12:]
    assert halving.best_index_ == 12 + int(np.argmax(last))
    # Every fit trained on rows of its fold's training set only.
    rows = {tuple(r): i for i, r in enumerate(X)}
    for x in seen[:-1]:
        ids = {rows[tuple(r)] for r in x}
        assert any(ids <= set(train) for train, _ in folds)
    assert {rows[tuple(r)] for r in seen[-1]} == set(range(len(y)))  # the refit
    # The last round is the grid search's cross-validation of the choice.
    full = KernelSVCCV(search="grid", **grid).fit(X, y)
    at = full.cv_results_["params"].index(halving.best_params_)
    assert halving.best_score_ == pytest.approx(full.cv_results_["mean_test_score"][at])
    assert halving.best_score_ >= full.best_score_ - 0.01
    again = KernelSVCCV(search="halving", random_state=0, **grid).fit(X, y)
    assert_allclose(again.cv_results_["mean_test_score"], results["mean_test_score"])
    # Nested: a round's training rows hold the round's before (one seed for all rounds,
    # whatever random_state is: None draws it once). 3,000 rows a fold: three rounds.
    X, y = classification(4500, 2, 5)
    rows = {tuple(r): i for i, r in enumerate(X)}
    seen.clear()
    monkeypatch.setattr(budgetsvm._budgetsvm, "fit_exact", recording)
    nested = KernelSVCCV(search="halving", random_state=None, **dict(grid, cv=3)).fit(X, y)
    monkeypatch.undo()
    assert nested.n_resources_ == [334, 1000, 3000]
    by_call = [{rows[tuple(r)] for r in x} for x in seen[:-1]]
    first, second = by_call[:9], by_call[9:]  # 3 folds x 3 gammas, then the survivors'
    for later in second:
        if len(later) < 3000:
            assert any(earlier < later for earlier in first)
    # A grid search after a halving one keeps none of the halving's attributes.
    halving.set_params(search="grid").fit(X, y)
    assert not hasattr(halving, "n_iterations_")


def test_halving_keeps_a_rare_class_in_every_subsample():
    # 3 rows of a third class among 3,000: a subsample of a ninth of a fold would miss it by
    # chance and leave rounds with fewer classes (or one, which no classifier fits).
    X, y = classification(3000, 2, 4)
    y = y.copy()
    y[:3] = 2
    cv = KernelSVCCV(Cs=[1.0, 4.0, 16.0], gammas=[0.1, 0.3, 1.0], cv=3, search="halving",
                     random_state=0).fit(X, y)
    assert list(cv.classes_) == [0, 1, 2]
    sub = budgetsvm._search_cv._subsample(np.arange(3000), y, 1 / 27, True)
    assert set(y[sub]) == {0, 1, 2}
    assert abs(len(sub) - 3000 / 27) <= 4
    assert sorted(sub) == sorted(set(sub))
