"""Callable kernels, as scikit-learn's SVMs take them: where the matrix fits the cache it is the
kernel precomputed (one call), beyond it the engine asks for the blocks of rows its solvers
need; any sequence of rows, clones and pickles, clear errors for bad values, the kernel's own
error mid-fit."""

from __future__ import annotations

import numpy as np
import pytest
from budgetsvm import KernelNuSVC, KernelNuSVR, KernelOneClassSVM, KernelSVC, KernelSVR
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.svm import SVC


def data(n=120, seed=0):
    X, y = make_classification(n_samples=n, n_features=6, random_state=seed)
    return X, y


def linear_kernel(A, B):
    return np.asarray(A @ B.T)


def char_kernel(A, B):
    """A kernel on strings: counts of each letter, dotted."""
    count = lambda s: np.array([s.count(c) for c in "ABC"], float)  # noqa: E731
    return np.array([[count(a) @ count(b) for b in B] for a in A])


@pytest.mark.parametrize(
    "est, target",
    [(KernelSVC(), "three"), (KernelSVR(C=2.0), "real"), (KernelOneClassSVM(nu=0.3), None),
     (KernelNuSVC(nu=0.3), "binary"), (KernelNuSVR(nu=0.4), "real")],
    ids=["svc", "svr", "one-class", "nu-svc", "nu-svr"],
)
def test_a_callable_kernel_is_its_matrix_precomputed(est, target):
    X, y = data(150, 4)
    if target == "three":
        y = np.digitize(X[:, 0], [-0.5, 0.5])
    elif target == "real":
        y = X @ np.arange(6.0)
    fit = (lambda e, X: e.fit(X)) if target is None else (lambda e, X: e.fit(X, y))
    calls = []

    def kernel(A, B):
        calls.append((A.shape[0], B.shape[0]))
        return linear_kernel(A, B)

    ours = fit(clone(est).set_params(kernel=kernel), X)
    pre = fit(clone(est).set_params(kernel="precomputed"), linear_kernel(X, X))
    assert_array_equal(ours.support_, pre.support_)
    assert_allclose(ours.dual_coef_, pre.dual_coef_)
    assert not hasattr(ours, "n_features_in_") and ours.shape_fit_ == X.shape
    assert ours.support_vectors_.shape == (0, 0)
    Xt, _ = data(40, 9)
    calls.clear()
    out = ours.predict(Xt)
    # One call, against the support rows only.
    assert calls == [(40, len(ours.support_))]
    assert_array_equal(out, pre.predict(linear_kernel(Xt, X)))


def test_a_callable_kernel_takes_any_sequence():
    words = ["AB", "A", "BB", "B", "AAB", "ABB", "C", "CC", "AC", "BC"] * 3
    y = np.array([w.count("A") >= w.count("B") for w in words], int)
    clf = KernelSVC(kernel=char_kernel, C=10.0).fit(words, y)
    assert clf.shape_fit_ == (30,)
    assert_array_equal(clf.predict(words), y)
    ref = SVC(kernel=char_kernel, C=10.0).fit(words, y)
    assert_allclose(clf.decision_function(["AAA", "BBC"]), ref.decision_function(["AAA", "BBC"]),
                    rtol=1e-3)
    assert set(clf._support_rows) <= set(words)


def test_a_callable_kernel_clones_pickles_and_refuses_model_files(tmp_path):
    import pickle

    X, y = data(80)
    clf = KernelSVC(kernel=linear_kernel, probability=True, random_state=0)
    fitted = clone(clf).fit(X, y)
    assert fitted.predict_proba(X).shape == (80, 2)
    assert_allclose(fitted.decision_function(X),
                    KernelSVC(kernel="linear").fit(X, y).decision_function(X), atol=1e-3)
    back = pickle.loads(pickle.dumps(fitted))
    assert_array_equal(back.predict(X), fitted.predict(X))
    with pytest.raises(ValueError, match="callable kernel cannot be saved"):
        fitted.save(tmp_path / "m.bsvm")
    clone(KernelSVC(kernel=lambda a, b: a @ b.T)).fit(X, y)


def test_a_callable_kernel_s_bad_values_and_size_are_clear_errors():
    X, y = data(60)
    with pytest.raises(ValueError, match="returned shape"):
        KernelSVC(kernel=lambda a, b: np.ones((2, 2))).fit(X, y)
    with pytest.raises(ValueError, match="NaN or infinity"):
        KernelSVC(kernel=lambda a, b: np.full((len(a), len(b)), np.nan)).fit(X, y)
    with pytest.raises(ValueError, match="numbers"):
        KernelSVC(kernel=lambda a, b: [["x"] * len(b)] * len(a)).fit(X, y)
    # Beyond the cache the values are checked as the engine asks for each block.
    with pytest.raises(ValueError, match="NaN or infinity"):
        KernelSVR(kernel=lambda a, b: np.full((len(a), len(b)), np.nan), cache_size=0.01).fit(
            X, X[:, 0]
        )
    fitted = KernelSVC(kernel=linear_kernel).fit(X, y)
    fitted.kernel = lambda a, b: np.ones((len(a), 1))
    with pytest.raises(ValueError, match="returned shape"):
        fitted.predict(X)


def rbf_half(A, B):
    return np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


@pytest.mark.parametrize(
    "est, target",
    [
        (KernelSVC(C=2.0), "three"),
        (KernelNuSVC(nu=0.1), "three"),
        (KernelSVR(C=2.0), "real"),
        (KernelNuSVR(nu=0.4), "real"),
        (KernelOneClassSVM(nu=0.2), None),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, (str, type(None))) else str(v),
)
@pytest.mark.parametrize("weighted", [False, True])
def test_a_callable_kernel_beyond_the_cache_asks_for_rows_as_the_solvers_need_them(
    est, target, weighted
):
    # Its n x n matrix three times cache_size: never formed, the engine asks for blocks of
    # rows and keeps cache_size of them; the model is the one of the whole matrix.
    rng = np.random.default_rng(3)
    n = 400
    X = rng.normal(size=(n, 3))
    y = {"three": np.digitize(X[:, 0] + X[:, 1], [-0.7, 0.7]), "real": np.sin(X[:, 0]) + X[:, 2]}
    w = rng.uniform(0.0, 2.0, size=n) if weighted else None
    if weighted:
        w[:15] = 0.0
    args = (X,) if target is None else (X, y[target])
    calls = []

    def kernel(A, B):
        calls.append((len(A), len(B)))
        return rbf_half(A, B)

    whole = clone(est).set_params(kernel=kernel, tol=1e-6).fit(*args, sample_weight=w)
    assert len(calls) == 1  # the whole matrix, one call
    calls.clear()
    small = 8 * n * n / 2**20 / 3
    rows = clone(est).set_params(kernel=kernel, tol=1e-6, cache_size=small)
    rows.fit(*args, sample_weight=w)
    assert_array_equal(rows.support_, whole.support_)
    assert_allclose(rows.dual_coef_, whole.dual_coef_, atol=1e-6)
    assert_allclose(rows.intercept_, whole.intercept_, atol=1e-6)
    # Blocks of rows (the diagonal's blocks of 256 too), never all of them at once.
    assert max(a for a, _ in calls) <= 256 and len(calls) > 3
    assert_array_equal(rows.predict(X[:50]), whole.predict(X[:50]))


def test_probabilities_of_a_callable_kernel_beyond_the_cache_are_those_of_its_matrix():
    # The folds fit on their rows of the unformed matrix; held-out rows are computed against
    # each fold's support rows only.
    rng = np.random.default_rng(5)
    n = 300
    X = rng.normal(size=(n, 3))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.6, 0.6])
    calls = []

    def kernel(A, B):
        calls.append((len(A), len(B)))
        return rbf_half(A, B)

    est = KernelSVC(kernel=kernel, probability=True, random_state=0, tol=1e-6)
    whole = clone(est).fit(X, y)
    calls.clear()
    rows = clone(est).set_params(cache_size=8 * n * n / 2**20 / 3).fit(X, y)
    # Blocks of at most 256 rows (the diagonal's), never the whole matrix.
    assert max(a for a, _ in calls) <= 256
    assert_allclose(rows.probA_, whole.probA_, rtol=1e-4, atol=1e-6)
    assert_allclose(rows.probB_, whole.probB_, rtol=1e-4, atol=1e-6)
    assert_allclose(rows.predict_proba(X[:40]), whole.predict_proba(X[:40]), atol=1e-6)


def test_a_callable_kernel_that_raises_mid_fit_stops_it_with_its_own_error():
    class Broken(RuntimeError):
        pass

    X, y = data(300)
    count = []

    def kernel(A, B):
        count.append(1)
        if len(count) > 12:
            raise Broken("the kernel broke")
        return linear_kernel(A, B)

    est = KernelSVC(kernel=kernel, cache_size=8 * 300 * 300 / 2**20 / 4)
    with pytest.raises(Broken, match="the kernel broke"):
        est.fit(X, y)
    # The solver stopped at its first failure: the function was not asked again.
    assert len(count) == 13
    assert not hasattr(est, "support_")
