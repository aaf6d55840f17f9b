"""Kernel rows in float64 where float32 cannot hold the problem: scikit-learn's polynomial SVR
example, whose kernel reaches 1.76e4 at C = 100 (float32's rounding of a kernel value times C is
0.1, against tol 1e-3), certified by the float64 duality gap computed here from the model alone;
Gaussian fits at usual C keep float32 rows."""

from __future__ import annotations

import numpy as np
import pytest
from budgetsvm import KernelSVC, KernelSVR
from sklearn.datasets import make_classification

C, EPSILON = 100.0, 0.1


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
def test_gaussian_fits_at_usual_c_keep_float32_rows(solver):
    X, y = make_classification(n_samples=400, n_features=6, random_state=0)
    for C_ in (1.0, 1000.0):
        auto = KernelSVC(C=C_, gamma=0.2, solver=solver).fit(X, y)
        forced = KernelSVC(
            C=C_, gamma=0.2, solver=solver, solver_options=dict(row_precision="float32")
        ).fit(X, y)
        assert auto.fit_stats_["row_precision"] == "float32"
        np.testing.assert_array_equal(auto.dual_coef_, forced.dual_coef_)
        np.testing.assert_array_equal(auto.intercept_, forced.intercept_)
    wide = KernelSVC(C=1e5, gamma=0.2, solver=solver).fit(X, y)
    assert wide.fit_stats_["row_precision"] == "float64"


def test_row_precision_is_checked():
    X, y = example()
    with pytest.raises(ValueError, match="row_precision"):
        KernelSVR(solver_options=dict(row_precision="half")).fit(X, y)
