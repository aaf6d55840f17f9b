"""Kernel rows in float64 where float32 cannot hold the problem, and strides along the directions
pair steps creep along: scikit-learn's polynomial SVR example, whose kernel reaches 1.76e4 at
C = 100 (float32's rounding of a kernel value times C is 0.1, against tol 1e-3), fitted to its
optimum and certified by the float64 duality gap computed here from the model alone; Gaussian
fits at usual C keep float32 rows and take no strides."""

from __future__ import annotations

import numpy as np
import pytest
from budgetsvm import KernelSVC, KernelSVR
from sklearn.datasets import make_classification

C, EPSILON = 100.0, 0.1
# The optimum of the example's primal in the explicit feature space of (x x' + 1)^3,
# phi(x) = (1, sqrt(3) x, sqrt(3) x^2, x^3): an interior-point solver (clarabel, gaps 1e-13)
# on min 1/2 |w|^2 + C sum of the slacks; the weight of the constant feature is 0.
OPTIMUM = 450.17645350759716
W_OPT = (1.060866865351756, -0.5047928896334243, 0.09523253704509238)
B_OPT = -0.1204303006187434


def example():
    """scikit-learn's "Support Vector Regression (SVR) using linear and non-linear kernels"."""
    rng = np.random.RandomState(0)
    X = np.sort(5 * rng.rand(40, 1), axis=0)
    y = np.sin(X).ravel()
    y[::5] += 3 * (0.5 - rng.rand(8))
    return X, y


def features(X):
    x = X[:, 0]
    return np.column_stack([np.ones_like(x), np.sqrt(3) * x, np.sqrt(3) * x**2, x**3])


def primal_and_dual(model, X, y):
    """The primal 1/2 w^T w + C sum max(0, |f - y| - epsilon) of the model's own predictions and
    w = Phi^T beta, and the dual y^T beta - epsilon |beta|_1 - 1/2 beta^T K beta of its
    coefficients beta, all in float64 with the exact kernel."""
    beta = np.zeros(len(y))
    beta[model.support_] = model.dual_coef_.ravel()
    phi = features(X)
    w = phi.T @ beta
    f = model.predict(X)
    primal = 0.5 * w @ w + C * np.maximum(0.0, np.abs(f - y) - EPSILON).sum()
    K = (X @ X.T + 1.0) ** 3
    dual = y @ beta - EPSILON * np.abs(beta).sum() - 0.5 * beta @ K @ beta
    return primal, dual


@pytest.mark.parametrize("tol", [1e-3, 1e-5])
@pytest.mark.parametrize("solver", ["alfpgm", "smo"])
def test_the_polynomial_svr_example_reaches_its_optimum(solver, tol):
    X, y = example()
    # filterwarnings = error: a ConvergenceWarning (the iteration cap) fails the test.
    model = KernelSVR(
        kernel="poly", C=C, gamma="auto", degree=3, epsilon=EPSILON, coef0=1, solver=solver, tol=tol
    ).fit(X, y)
    assert model.fit_status_ == 0
    primal, dual = primal_and_dual(model, X, y)
    # Weak duality against the certified optimum, and the gap within tol of the objective.
    assert dual <= OPTIMUM + 1e-9 * OPTIMUM <= primal + 2e-9 * OPTIMUM
    assert (primal - dual) / primal < tol
    x = X[:, 0]
    best = np.sqrt(3) * W_OPT[0] * x + np.sqrt(3) * W_OPT[1] * x**2 + W_OPT[2] * x**3 + B_OPT
    assert np.abs(model.predict(X) - best).max() < 0.02
    assert model.n_iter_ < 10**7
    assert model.fit_stats_["row_precision"] == "float64"


def test_float32_rows_cannot_hold_the_example():
    """The same fit with float32 rows (LIBSVM's) solves a problem float32's rounding made: its
    duality gap, measured in float64, stays far above tol."""
    X, y = example()
    model = KernelSVR(
        kernel="poly",
        C=C,
        gamma="auto",
        degree=3,
        epsilon=EPSILON,
        coef0=1,
        solver="smo",
        solver_options=dict(row_precision="float32"),
    ).fit(X, y)
    assert model.fit_stats_["row_precision"] == "float32"
    primal, dual = primal_and_dual(model, X, y)
    assert (primal - dual) / primal > 1e-3


@pytest.mark.parametrize("solver", ["alfpgm", "smo"])
def test_gaussian_fits_at_usual_c_keep_float32_rows_and_their_steps(solver):
    X, y = make_classification(n_samples=400, n_features=6, random_state=0)
    for C_ in (1.0, 1000.0):
        auto = KernelSVC(C=C_, gamma=0.2, solver=solver).fit(X, y)
        forced = KernelSVC(
            C=C_, gamma=0.2, solver=solver, solver_options=dict(row_precision="float32")
        ).fit(X, y)
        assert auto.fit_stats_["row_precision"] == "float32"
        assert auto.fit_stats_["strides"] == 0
        np.testing.assert_array_equal(auto.dual_coef_, forced.dual_coef_)
        np.testing.assert_array_equal(auto.intercept_, forced.intercept_)
    wide = KernelSVC(C=1e5, gamma=0.2, solver=solver).fit(X, y)
    assert wide.fit_stats_["row_precision"] == "float64"


def test_row_precision_is_checked():
    X, y = example()
    with pytest.raises(ValueError, match="row_precision"):
        KernelSVR(solver_options=dict(row_precision="half")).fit(X, y)
