"""BSCA (budgeted dual coordinate ascent) against independent formulations of its dual problem.

Binary dual without bias: max_{0 <= alpha <= C} 1^T alpha - 1/2 alpha^T Q alpha with
Q_ij = y_i y_j k(x_i, x_j). The reference optimum comes from scipy's L-BFGS-B on the same box QP
(a different algorithm: quasi-Newton with bound projection, not coordinate ascent).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import BudgetSVC, _budgetsvm
from conftest import xor_data
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import minimize
from sklearn.metrics.pairwise import rbf_kernel


def reference_dual(X: np.ndarray, ypm: np.ndarray, C: float, gamma: float):
    """Box-constrained dual optimum by L-BFGS-B; returns (alpha, objective)."""
    Q = ypm[:, None] * ypm[None, :] * rbf_kernel(X, X, gamma=gamma)

    def neg_dual(a):
        qa = Q @ a
        return 0.5 * a @ qa - a.sum(), qa - 1.0

    res = minimize(
        neg_dual,
        np.zeros(len(ypm)),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, C)] * len(ypm),
        options=dict(ftol=1e-15, gtol=1e-11, maxiter=10_000),
    )
    return res.x, -res.fun


def dual_objective(X, ypm, alpha, gamma):
    Q = ypm[:, None] * ypm[None, :] * rbf_kernel(X, X, gamma=gamma)
    return alpha.sum() - 0.5 * alpha @ Q @ alpha


def fit_bsca_alphas(X, y01, C, gamma, budget, epochs, seed=0, **kw):
    """Runs the native BSCA and returns (result dict, alphas after each epoch)."""
    alphas = []

    def observer(info):
        alphas.append(info["alphas"][0].copy())

    result = _budgetsvm.fit_bsca(
        X,
        np.ascontiguousarray(y01, dtype=np.uint32),
        2,
        c=C,
        gamma=gamma,
        budget=budget,
        epochs=epochs,
        maintenance=kw.get("maintenance", "merge"),
        merge=kw.get("merge", "lookup-wd"),
        seed=seed,
        observer=observer,
        dual_step=kw.get("dual_step", "full"),
    )
    return result, alphas


@pytest.mark.parametrize("C", [0.1, 1.0, 10.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_without_budget_reaches_the_exact_dual_optimum(C, seed):
    X, y = xor_data(60, seed=100 + seed)
    ypm = np.where(y == 1, 1.0, -1.0)
    gamma = 2.0
    ref_alpha, ref_obj = reference_dual(X, ypm, C, gamma)
    result, alphas = fit_bsca_alphas(X, y, C, gamma, budget=1000, epochs=1000, seed=seed)
    alpha = alphas[-1]
    assert result["maintenance_events"] == 0
    obj = dual_objective(X, ypm, alpha, gamma)
    assert obj == pytest.approx(ref_obj, rel=1e-8)
    # KKT: the projected gradient of the dual vanishes at alpha.
    Q = ypm[:, None] * ypm[None, :] * rbf_kernel(X, X, gamma=gamma)
    grad = 1.0 - Q @ alpha
    projected = np.where(
        alpha <= 0, np.maximum(grad, 0), np.where(alpha >= C, np.minimum(grad, 0), grad)
    )
    assert np.abs(projected).max() < 1e-6  # LIBSVM stops at 1e-3
    # Q is nearly singular on such data (eigenvalues down to 1e-11), so alpha itself is not well
    # determined, but the margins Q alpha (the decision values) are.
    assert_allclose(Q @ alpha, Q @ ref_alpha, atol=1e-5)
    # The model is exactly w = sum_i alpha_i y_i phi(x_i): one SV per point with alpha_i > 0.
    sv, coef = result["support_vectors"], result["coef"][:, 0]
    assert len(sv) == np.count_nonzero(alpha)
    for row, c in zip(sv, coef):
        (i,) = np.flatnonzero((X == row).all(axis=1))
        assert c == pytest.approx(ypm[i] * alpha[i], rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("dual_step", ["full", "decaying"])
def test_without_budget_dual_increases_every_epoch(dual_step):
    X, y = xor_data(80, seed=110)
    ypm = np.where(y == 1, 1.0, -1.0)
    _, alphas = fit_bsca_alphas(X, y, 5.0, 3.0, budget=1000, epochs=20, dual_step=dual_step)
    objectives = [dual_objective(X, ypm, a, 3.0) for a in alphas]
    # Exact coordinate ascent never decreases the dual (up to rounding).
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(objectives, objectives[1:]))


def test_without_budget_matches_sklearn_svc_on_a_symmetric_problem():
    # A problem symmetric under x -> -x with the labels swapped has bias 0 in the exact SVM with
    # bias, so scikit-learn's SVC (LIBSVM) solves the same problem as BSCA's bias-free dual.
    rng = np.random.default_rng(7)
    half = rng.normal(size=(30, 2)) + np.array([1.0, 0.5])
    X = np.vstack([half, -half])
    y = np.r_[np.ones(30, int), np.zeros(30, int)]
    from sklearn.svm import SVC

    C, gamma = 1.0, 0.5
    svc = SVC(C=C, gamma=gamma, tol=1e-10).fit(X, y)
    assert abs(svc.intercept_[0]) < 1e-6
    clf = BudgetSVC(
        C=C,
        gamma=gamma,
        budget=1000,
        epochs=500,
        solver="bsca",
        dual_step="full",
        random_state=0,
        polish=False,
    )
    clf.fit(X, y)
    X_test = rng.normal(scale=2.0, size=(200, 2))
    assert_allclose(clf.decision_function(X_test), svc.decision_function(X_test), atol=1e-5)


def test_decaying_steps_are_full_steps_while_the_budget_never_binds():
    # No maintenance, no drift to damp: B >= n gives the exact solver's model with either step.
    X, y = xor_data(60, seed=104)
    fits = [
        fit_bsca_alphas(X, y, 1.0, 2.0, budget=1000, epochs=30, dual_step=s)
        for s in ("decaying", "full")
    ]
    assert fits[0][0]["maintenance_events"] == 0
    assert_array_equal(fits[0][1][-1], fits[1][1][-1])
    assert_array_equal(fits[0][0]["coef"], fits[1][0]["coef"])


@pytest.mark.parametrize("n_classes", [2, 3])
def test_decaying_and_full_steps_share_the_first_epoch(n_classes):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 3))
    y = rng.integers(0, n_classes, 300)
    fits = [
        BudgetSVC(budget=12, epochs=1, solver="bsca", dual_step=s, random_state=4).fit(X, y)
        for s in ("decaying", "full")
    ]
    assert_array_equal(fits[0].support_vectors_, fits[1].support_vectors_)
    assert_array_equal(fits[0].dual_coef_, fits[1].dual_coef_)
    two = [
        BudgetSVC(budget=12, epochs=2, solver="bsca", dual_step=s, random_state=4).fit(X, y)
        for s in ("decaying", "full")
    ]
    assert not np.array_equal(two[0].dual_coef_, two[1].dual_coef_)


def test_decaying_steps_stop_the_drift_at_large_C():
    # A wide kernel and large C: the setting where full steps with merging drift (the a9a case
    # of docs/bsca_paper002.md, small). Decaying steps keep the primal objective of the budgeted
    # model from rising over the later epochs.
    rng = np.random.default_rng(9)
    X = rng.normal(size=(1500, 5))
    y = (X[:, 0] + 0.5 * rng.normal(size=1500) > 0.3).astype(int)
    primal = {}
    for step in ("full", "decaying"):
        clf = BudgetSVC(
            C=32.0,
            gamma=0.02,
            budget=20,
            epochs=15,
            solver="bsca",
            dual_step=step,
            record_history=True,
            random_state=0,
        ).fit(X, y)
        primal[step] = np.asarray(clf.history_["primal"])
    assert primal["decaying"][-1] < primal["full"][-1]


@given(
    n=st.integers(10, 120),
    budget=st.integers(2, 15),
    C=st.sampled_from([2.0**-3, 1.0, 2.0**5]),
    gamma=st.floats(0.1, 20.0),
    maintenance=st.sampled_from(["merge", "remove", "project"]),
    merge=st.sampled_from(["lookup-wd", "lookup-h", "gss", "gss-precise"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_box_constraint_holds_with_a_budget(n, budget, C, gamma, maintenance, merge, seed):
    X, y = xor_data(n, seed=seed % 1000)
    y[:2] = [0, 1]
    result, alphas = fit_bsca_alphas(
        X, y, C, gamma, budget, epochs=3, seed=seed, maintenance=maintenance, merge=merge
    )
    assert len(result["support_vectors"]) <= budget
    for alpha in alphas:
        assert alpha.shape == (n,)
        assert np.all(alpha >= 0.0) and np.all(alpha <= C)
    assert np.all(np.isfinite(result["coef"]))


@pytest.mark.parametrize("n_classes", [2, 4])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_seeded_runs_are_reproducible(n_classes, sparse):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 5))
    X[np.abs(X) < 0.5] = 0.0
    y = rng.integers(0, n_classes, 400)
    Xin = sp.csr_matrix(X) if sparse else X
    fits = [
        BudgetSVC(budget=20, epochs=3, solver="bsca", random_state=rs).fit(Xin, y)
        for rs in (11, 11, 12)
    ]
    assert_array_equal(fits[0].support_vectors_, fits[1].support_vectors_)
    assert_array_equal(fits[0].dual_coef_, fits[1].dual_coef_)
    assert not np.array_equal(fits[0].dual_coef_, fits[2].dual_coef_)


def test_multiclass_is_one_vs_rest_on_one_shared_budget():
    # While the budget does not bind, each class's column of the model is the binary BSCA model
    # of that class against the rest (the problems share SVs, not dual variables).
    rng = np.random.default_rng(4)
    centers = rng.normal(scale=3.0, size=(3, 2))
    y = rng.integers(0, 3, 600)
    X = centers[y] + rng.normal(size=(600, 2))
    kw = dict(
        C=1.0, gamma=0.5, epochs=4, solver="bsca", random_state=0, average=False, polish=False
    )
    clf = BudgetSVC(budget=1000, multiclass="shared", **kw).fit(X, y)
    assert clf.dual_coef_.shape[0] == 3
    for k in range(3):
        binary = BudgetSVC(budget=1000, **kw).fit(X, y == k)
        assert_allclose(clf.decision_function(X)[:, k], binary.decision_function(X), atol=1e-9)
    # With a budget, it bounds the whole model (every SV carries three coefficients).
    small = BudgetSVC(budget=25, multiclass="shared", **kw).fit(X, y)
    assert small.support_vectors_.shape[0] <= 25
    assert small.score(X, y) > 0.85


def test_merging_keeps_coefficient_signs():
    # Merging pairs SVs of the same sign, so no merged SV can flip the sign of a coefficient that
    # came from one label's points only: on well separated classes each SV's coefficient has the
    # sign of the side of the data it lies on.
    rng = np.random.default_rng(5)
    X = np.vstack([rng.normal(size=(300, 2)) + 4.0, rng.normal(size=(300, 2)) - 4.0])
    y = np.r_[np.ones(300, int), np.zeros(300, int)]
    clf = BudgetSVC(C=10.0, gamma=0.5, budget=8, epochs=5, solver="bsca", random_state=0)
    clf.fit(X, y)
    assert clf.fit_stats_["maintenance_events"] > 0
    side = np.sign(clf.support_vectors_.sum(axis=1))
    assert_array_equal(np.sign(clf.dual_coef_[0]), side)


# --- history ------------------------------------------------------------------------------------

HISTORY_KEYS = {
    "epoch",
    "seconds",
    "primal",
    "dual",
    "train_accuracy",
    "val_accuracy",
    "maintenance_fraction",
    "n_sv",
    "mean_sv_nnz",
}


@pytest.mark.parametrize("solver", ["bsgd", "bsca"])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_history_records_every_epoch(solver, n_classes):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(500, 3))
    y = rng.integers(0, n_classes, 500)
    X_val, y_val = X[:100] + 0.01, y[:100]
    # The history describes the budgeted pass; without the polish its last entry is the model.
    clf = BudgetSVC(
        budget=15,
        epochs=4,
        solver=solver,
        record_history=True,
        random_state=0,
        polish=False,
        multiclass="shared",
    )
    clf.fit(X, y, eval_set=(X_val, y_val))
    h = clf.history_
    assert set(h) == HISTORY_KEYS
    assert all(len(v) == 4 for v in h.values())
    assert h["epoch"] == [1, 2, 3, 4]
    assert np.all(np.diff(h["seconds"]) >= 0)
    assert all(0.0 <= f <= 1.0 for f in h["maintenance_fraction"])
    # The last entry describes the returned model.
    assert h["train_accuracy"][-1] == pytest.approx(clf.score(X, y))
    assert h["val_accuracy"][-1] == pytest.approx(clf.score(X_val, y_val))
    assert h["n_sv"][-1] == clf.support_vectors_.shape[0]
    if solver == "bsgd":
        assert np.all(np.isnan(h["dual"]))
    else:
        # Weak duality holds for any feasible alpha and any w, the budgeted one included.
        assert np.all(np.asarray(h["dual"]) <= np.asarray(h["primal"]) + 1e-9)


def test_history_primal_is_the_c_form_objective_of_the_returned_model():
    X, y = xor_data(300, seed=120)
    C = 3.0
    clf = BudgetSVC(
        C=C, gamma=2.0, budget=10, epochs=2, solver="bsca", record_history=True, polish=False
    )
    clf.fit(X, y)
    sv, beta = clf.support_vectors_, clf.dual_coef_[0]
    w_sq = beta @ rbf_kernel(sv, sv, gamma=2.0) @ beta
    f = rbf_kernel(X, sv, gamma=2.0) @ beta
    hinge = np.maximum(0.0, 1.0 - np.where(y == 1, 1.0, -1.0) * f).sum()
    assert clf.history_["primal"][-1] == pytest.approx(0.5 * w_sq + C * hinge, rel=1e-9)


def test_history_without_budget_closes_the_duality_gap():
    X, y = xor_data(100, seed=121)
    clf = BudgetSVC(
        C=1.0,
        gamma=2.0,
        budget=1000,
        epochs=200,
        solver="bsca",
        dual_step="full",
        average=False,  # the primal of the model the last alpha describes
        record_history=True,
        random_state=0,
    )
    clf.fit(X, y)
    primal, dual = clf.history_["primal"][-1], clf.history_["dual"][-1]
    assert 0.0 <= primal - dual <= 1e-5 * abs(primal)


def test_history_off_by_default_and_eval_set_needs_it():
    X, y = xor_data(100, seed=122)
    clf = BudgetSVC(budget=10, epochs=1).fit(X, y)
    assert clf.history_ is None
    with pytest.raises(ValueError, match="record_history"):
        BudgetSVC(budget=10).fit(X, y, eval_set=(X, y))


def test_history_eval_set_checks():
    X, y = xor_data(100, seed=123)
    clf = BudgetSVC(budget=10, epochs=1, record_history=True)
    with pytest.raises(ValueError, match="tuple"):
        clf.fit(X, y, eval_set=[X, y])
    with pytest.raises(ValueError, match="rows"):
        clf.fit(X, y, eval_set=(X, y[:50]))
    with pytest.raises(ValueError, match="features"):
        clf.fit(X, y, eval_set=(X[:, :1], y))
    with pytest.raises(ValueError, match="NaN|infinity"):
        clf.fit(X, y, eval_set=(np.full_like(X, np.nan), y))
    # Labels never seen in training count as errors.
    clf.fit(X, y, eval_set=(X, np.full(100, 7)))
    assert clf.history_["val_accuracy"][-1] == 0.0


def test_history_dual_skipped_above_the_row_limit(monkeypatch):
    from budgetsvm import _history

    monkeypatch.setattr(_history, "DUAL_MAX_ROWS", 50)
    X, y = xor_data(100, seed=124)
    clf = BudgetSVC(budget=10, epochs=2, solver="bsca", record_history=True).fit(X, y)
    assert np.all(np.isnan(clf.history_["dual"]))
    assert np.all(np.isfinite(clf.history_["primal"]))


# --- plotting -----------------------------------------------------------------------------------


@pytest.mark.parametrize("against", ["epoch", "seconds"])
def test_plot_histories(tmp_path, against):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from budgetsvm.plotting import plot_histories

    X, y = xor_data(300, seed=130)
    histories = {
        s: BudgetSVC(budget=10, epochs=3, solver=s, record_history=True)
        .fit(X, y, eval_set=(X, y))
        .history_
        for s in ("bsgd", "bsca")
    }
    fig = plot_histories(histories, against=against, title="xor")
    axes = fig.axes
    assert len(axes) == 3
    # objective panel: primal for both, dual only for BSCA.
    labels = [line.get_label() for line in axes[0].get_lines()]
    assert labels == ["bsgd primal", "bsca primal", "bsca dual"]
    assert_allclose(axes[1].get_lines()[1].get_ydata(), histories["bsca"]["val_accuracy"])
    assert_allclose(axes[2].get_lines()[0].get_xdata(), histories["bsgd"][against])
    fig.savefig(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_plot_histories_rejects_bad_arguments():
    pytest.importorskip("matplotlib")
    from budgetsvm.plotting import plot_histories

    with pytest.raises(ValueError, match="against"):
        plot_histories({"a": {"epoch": [1]}}, against="minutes")
    with pytest.raises(ValueError, match="panel"):
        plot_histories({"a": {"epoch": [1]}}, panels=["loss"])
    with pytest.raises(ValueError, match="record_history"):
        plot_histories({"a": None})
    with pytest.raises(ValueError, match="no histories"):
        plot_histories({})


@pytest.mark.parametrize("maintenance", ["merge", "project", "remove"])
def test_average_returns_the_last_epochs_mean_model(maintenance):
    X, y = xor_data(600, seed=140)
    fits = {
        avg: BudgetSVC(
            C=10.0,
            gamma=2.0,
            budget=15,
            epochs=3,
            solver="bsca",
            maintenance=maintenance,
            average=avg,
            random_state=2,
        ).fit(X, y)
        for avg in (True, False)
    }
    if maintenance == "remove":
        # Documented: removal discards SVs with their averages, so it returns the last model.
        assert_array_equal(fits[True].dual_coef_, fits[False].dual_coef_)
    else:
        assert not np.array_equal(fits[True].dual_coef_, fits[False].dual_coef_)
        assert fits[True].support_vectors_.shape[0] <= 15
        assert fits[True].score(X, y) > 0.9


def test_average_of_a_converged_run_is_the_solution():
    # Without a budget and after convergence every step leaves the model unchanged, so the
    # average over the last epoch is the exact solution itself.
    X, y = xor_data(60, seed=141)
    kw = dict(C=1.0, gamma=2.0, budget=1000, epochs=400, solver="bsca", random_state=0)
    avg = BudgetSVC(average=True, **kw).fit(X, y)
    last = BudgetSVC(average=False, **kw).fit(X, y)
    assert_allclose(avg.decision_function(X), last.decision_function(X), atol=1e-5)
