"""budgetsvm.dask.search: the cross-validated estimators' searches with their fits on a local
Dask cluster give the search that ``fit`` runs here (the same cv_results_, choice and refit)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from budgetsvm import BudgetSVCCV, BudgetSVRCV, KernelNuSVCCV, KernelSVCCV, KernelSVRCV
from numpy.testing import assert_array_equal
from sklearn.datasets import make_classification, make_regression

pytest.importorskip("dask")
pytest.importorskip("distributed")
from budgetsvm import dask as bdask  # noqa: E402
from budgetsvm._dask_search import DaskTaskMap  # noqa: E402
from conftest import local_dask_client  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def client():
    with local_dask_client(n_workers=2, threads_per_worker=1) as c:
        yield c


def classes(n, k, seed):
    return make_classification(
        n_samples=n, n_features=6, n_informative=4, n_classes=k, random_state=seed
    )


# Searches of every kind: the exact C paths (grid and halving), a cold nu grid, the budgeted
# rounds with budget ladders, regression with epsilons, sample weights.
CASES = [
    ("grid", lambda: KernelSVCCV(Cs=[0.5, 4.0], gammas=[0.1, 1.0], cv=3, n_jobs=1), 2),
    ("halving", lambda: KernelSVCCV(Cs=[0.5, 2.0, 8.0], search="halving", cv=3, n_jobs=1), 3),
    ("nu", lambda: KernelNuSVCCV(nus=[0.2, 0.5], gammas=[0.3], cv=3, n_jobs=1), 2),
    (
        "budget",
        lambda: BudgetSVCCV(
            Cs=[1.0, 4.0], gammas=[0.2, 1.0], cv=3, search="halving", random_state=0, n_jobs=1
        ),
        2,
    ),
]


@pytest.mark.parametrize("name,make,k", CASES, ids=[c[0] for c in CASES])
def test_the_search_on_the_cluster_is_the_local_search(client, name, make, k):
    X, y = classes(2400 if name == "budget" else 600, k, 1)
    w = np.random.default_rng(2).uniform(0.5, 2.0, len(y)) if name == "grid" else None
    here = make().fit(X, y, sample_weight=w)
    there = bdask.search(make(), X, y, sample_weight=w, client=client)
    assert there.best_params_ == here.best_params_
    assert there.best_score_ == here.best_score_
    for key in ("mean_test_score", "rank_test_score", "params"):
        assert_array_equal(np.asarray(there.cv_results_[key]), np.asarray(here.cv_results_[key]))
    for f in range(3):
        assert_array_equal(
            there.cv_results_[f"split{f}_test_score"], here.cv_results_[f"split{f}_test_score"]
        )
    if name == "budget":
        assert there.best_budget_ == here.best_budget_
        assert there.budget_search_ == here.budget_search_
    assert_array_equal(there.predict(X), here.predict(X))


def test_the_regression_search_with_epsilons(client):
    X, y = make_regression(n_samples=500, n_features=5, noise=5.0, random_state=0)
    y = y / y.std()

    def make():
        return KernelSVRCV(Cs=[1.0, 8.0], gammas=[0.2], epsilons=[0.05, 0.2], cv=3, n_jobs=1)

    here, there = make().fit(X, y), bdask.search(make(), X, y, client=client)
    assert there.best_params_ == here.best_params_
    assert_array_equal(there.cv_results_["mean_test_score"], here.cv_results_["mean_test_score"])
    there = bdask.search(
        BudgetSVRCV(Cs=[1.0], gammas=[0.2], budgets=60, cv=3, n_jobs=1, random_state=0),
        X,
        y,
        client=client,
    )
    here = BudgetSVRCV(Cs=[1.0], gammas=[0.2], budgets=60, cv=3, n_jobs=1, random_state=0).fit(X, y)
    assert there.best_score_ == here.best_score_


def test_progress_counts_every_fit(client):
    X, y = classes(400, 2, 3)
    seen = []
    est = KernelSVCCV(Cs=[1.0, 4.0], gammas=[0.1, 1.0], cv=2, n_jobs=1)
    est.fit(
        X,
        y,
        _callback=lambda done, planned: seen.append((done, planned)),
        _map=DaskTaskMap(client),
    )
    assert seen[-1] == (8, 8)  # 2 x 2 points on 2 folds, counted as the paths finish
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_a_failing_fit_raises_here_and_leaves_nothing_running(client):
    X, y = classes(300, 2, 4)
    X[5, 0] = np.nan  # refused by validation before any task
    with pytest.raises(ValueError, match="NaN"):
        bdask.search(KernelSVCCV(Cs=[1.0], gammas=[0.5], cv=2), X, y, client=client)
    # A task's own error: a scoring the search's models cannot give.
    X, y = classes(300, 2, 5)
    with pytest.raises(ValueError, match="scoring"):
        bdask.search(
            KernelSVCCV(Cs=[1.0], gammas=[0.5], cv=2, scoring="neg_log_loss"), X, y, client=client
        )
    # The search cancels its other tasks as it raises; the scheduler drops them as the
    # cancellation reaches it (asynchronously: CI once saw a fold task still listed at once).
    deadline = time.monotonic() + 30.0
    while any(client.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(client.processing().values())


def test_only_search_estimators_and_a_client_are_taken(client):
    from budgetsvm import KernelSVC

    X, y = classes(100, 2, 6)
    with pytest.raises(TypeError, match="cross-validated estimator"):
        bdask.search(KernelSVC(), X, y, client=client)
