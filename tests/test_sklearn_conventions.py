"""scikit-learn's SVM conventions the exact estimators follow where they used to differ: a sparse
``dual_coef_`` after a sparse fit, the message when probability is switched on after fitting,
rows of negative weight left out, C = inf, break_ties checked at predict and nu = 1 of the
one-class SVM (tests/test_exact_kernels.py), each against scikit-learn itself. Callable kernels:
tests/test_callable_kernels.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import KernelOneClassSVM, KernelSVC, KernelSVR, load_model
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.datasets import make_classification, make_regression
from sklearn.exceptions import NotFittedError
from sklearn.svm import SVC, SVR, OneClassSVM


def data(n=120, seed=0):
    X, y = make_classification(n_samples=n, n_features=6, random_state=seed)
    return X, y


@pytest.mark.parametrize(
    "ours, theirs, target",
    [
        (KernelSVC(kernel="linear"), SVC(kernel="linear"), "binary"),
        (KernelSVC(), SVC(), "three"),
        (KernelSVR(C=3.0), SVR(C=3.0), "real"),
        (KernelOneClassSVM(nu=0.3), OneClassSVM(nu=0.3), None),
    ],
    ids=["svc-linear", "svc-3-classes", "svr", "one-class"],
)
def test_dual_coef_is_sparse_after_a_sparse_fit(ours, theirs, target, tmp_path):
    X, y = data()
    if target == "three":
        y = np.digitize(X[:, 0], [-0.5, 0.5])
    elif target == "real":
        y = X @ np.arange(6.0)
    Xs = sp.csr_matrix(X)
    fit = (lambda est, X: est.fit(X)) if target is None else (lambda est, X: est.fit(X, y))
    sparse, dense, ref = fit(ours, Xs), fit(clone_of(ours), X), fit(theirs, Xs)
    assert sp.issparse(sparse.dual_coef_) and sp.issparse(ref.dual_coef_)
    assert isinstance(dense.dual_coef_, np.ndarray)
    assert sparse.dual_coef_.shape[0] == ref.dual_coef_.shape[0]
    assert_allclose(sparse.dual_coef_.toarray(), dense.dual_coef_)
    assert_allclose(sparse.decision_function(Xs) if target != "real" else sparse.predict(Xs),
                    dense.decision_function(X) if target != "real" else dense.predict(X))
    if getattr(ours, "kernel", "") == "linear":
        assert sp.issparse(sparse.coef_)
        assert_allclose(sparse.coef_.toarray(), dense.coef_)
    # A model file keeps it sparse.
    path = tmp_path / "model.bsvm"
    sparse.save(path)
    back = load_model(path)
    assert sp.issparse(back.dual_coef_)
    assert_allclose(back.dual_coef_.toarray(), sparse.dual_coef_.toarray())


def clone_of(est):
    from sklearn.base import clone

    return clone(est)


def test_probability_switched_on_after_fitting_says_so():
    X, y = data()
    clf = KernelSVC().fit(X, y)
    assert not hasattr(clf, "predict_proba")
    clf.probability = True
    assert hasattr(clf, "predict_proba")
    with pytest.raises(NotFittedError, match="not available when fitted with probability=False"):
        clf.predict_proba(X)
    # Unfitted: scikit-learn's plain message.
    with pytest.raises(NotFittedError, match="not fitted yet"):
        KernelSVC(probability=True).predict_proba(X)


@pytest.mark.parametrize("est", [KernelSVC(kernel="linear"), KernelSVR(kernel="linear")])
def test_rows_of_negative_weight_are_left_out_as_scikit_learn_does(est):
    X, y = data(80, 1)
    if isinstance(est, KernelSVR):
        y = X @ np.arange(6.0)
    w = np.random.default_rng(2).uniform(-1.0, 2.0, size=len(y))
    given = w.copy()
    ours = est.fit(X, y, sample_weight=w)
    assert_array_equal(w, given)
    kept = w > 0
    ref = clone_of(est).fit(X[kept], y[kept], sample_weight=w[kept])
    assert_allclose(ours.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    assert_array_equal(ours.support_, np.flatnonzero(kept)[ref.support_])
    theirs = (SVC if isinstance(est, KernelSVC) else SVR)(kernel="linear").fit(X, y, sample_weight=w)
    assert_allclose(ours.coef_, theirs.coef_, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("est", [KernelSVC(), KernelSVR(), KernelOneClassSVM()])
@pytest.mark.parametrize("weight", [0.0, -0.3])
def test_no_row_of_positive_weight_is_scikit_learn_s_error(est, weight):
    X, y = data(30)
    with pytest.raises(ValueError, match="Invalid input - all samples have zero or negative"):
        est.fit(X, y, sample_weight=np.full(len(y), weight))


def test_one_class_left_by_the_weights_is_scikit_learn_s_error():
    X, y = data(30)
    w = np.where(y == 0, -0.5, 1.0)
    with pytest.raises(ValueError, match="all samples with positive weights belong to the same"):
        KernelSVC().fit(X, y, sample_weight=w)
    # Without weights the message says what is wrong in our words.
    with pytest.raises(ValueError, match="only one class"):
        KernelSVC().fit(X, np.zeros(len(y)))


@pytest.mark.parametrize("solver", ["alfpgm", "smo"])
def test_c_inf_is_the_hard_margin(solver):
    X, y = make_classification(n_samples=100, random_state=3)
    hard = KernelSVC(C=np.inf, solver=solver).fit(X, y)
    large = KernelSVC(C=1e10, solver=solver).fit(X, y)
    assert_array_equal(hard.predict(X), large.predict(X))
    assert_array_equal(hard.predict(X), SVC(C=np.inf).fit(X, y).predict(X))
    Xr, z = make_regression(n_samples=100, random_state=3)
    reg = KernelSVR(C=float("inf"), solver=solver).fit(Xr, z)
    assert_allclose(reg.predict(Xr), KernelSVR(C=1e10, solver=solver).fit(Xr, z).predict(Xr),
                    rtol=1e-3, atol=1e-3 * np.abs(z).max())
    for bad in (0.0, -1.0, np.nan, -np.inf):
        with pytest.raises(ValueError, match="C must be"):
            KernelSVC(C=bad).fit(X, y)
