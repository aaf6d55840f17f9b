"""probability=True: Platt sigmoids from an internal cross-validation and pairwise coupling, as
LIBSVM. The parts are checked against independent formulations (LIBSVM's iterative coupling,
a generic optimiser for the sigmoid's likelihood), the whole against scikit-learn's SVC."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from budgetsvm import BudgetSVC, KernelSVC, _probability
from conftest import xor_data
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import minimize
from sklearn.calibration import CalibratedClassifierCV
from sklearn.svm import SVC


def three_classes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    X, y = xor_data(n, seed)
    return X, np.where(X[:, 0] > 0.5, 2, y)


def libsvm_coupling(r: np.ndarray) -> np.ndarray:
    """LIBSVM's ``multiclass_probability`` (the iterative method 2 of Wu, Lin & Weng), written
    from the paper's update rule: an independent solver of the same problem."""
    k = r.shape[0]
    Q = np.zeros((k, k))
    for t in range(k):
        for j in range(k):
            if j != t:
                Q[t, t] += r[j, t] ** 2
                Q[t, j] = -r[j, t] * r[t, j]
    p = np.full(k, 1.0 / k)
    for _ in range(1000):
        Qp = Q @ p
        pQp = p @ Qp
        if np.max(np.abs(Qp - pQp)) < 1e-12:
            break
        for t in range(k):
            diff = (-Qp[t] + pQp) / Q[t, t]
            p[t] += diff
            pQp = (pQp + diff * (diff * Q[t, t] + 2 * Qp[t])) / (1 + diff) ** 2
            Qp = (Qp + diff * Q[t, :]) / (1 + diff)
            p /= 1 + diff
    return p


@settings(max_examples=40)
@given(k=st.integers(3, 7), seed=st.integers(0, 2**31))
def test_coupling_matches_libsvm_iteration(k, seed):
    rng = np.random.default_rng(seed)
    r = np.zeros((k, k))
    for a in range(k):
        for b in range(a + 1, k):
            r[a, b] = np.clip(rng.uniform(), _probability.MIN_PROB, 1 - _probability.MIN_PROB)
            r[b, a] = 1 - r[a, b]
    p = _probability.couple(r[None])[0]
    assert np.all(p >= 0) and abs(p.sum() - 1) < 1e-12
    assert_allclose(p, libsvm_coupling(r), atol=1e-8)


def test_coupling_recovers_consistent_pairwise_probabilities():
    """If r_ij = p_i / (p_i + p_j) for some p, coupling returns that p."""
    p = np.array([0.5, 0.2, 0.2, 0.1])
    r = p[:, None] / (p[:, None] + p[None, :])
    assert_allclose(_probability.couple(r[None])[0], p, atol=1e-12)


@settings(max_examples=30)
@given(seed=st.integers(0, 2**31), weighted=st.booleans())
def test_sigmoid_fit_is_the_maximum_likelihood(seed, weighted):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 200))
    dec = rng.normal(size=n) * rng.uniform(0.2, 5)
    positive = rng.uniform(size=n) < 1 / (1 + np.exp(-2 * dec + rng.normal()))
    if positive.all() or not positive.any():
        positive[0] = not positive[0]
    w = rng.uniform(0.1, 3, size=n) if weighted else np.ones(n)
    a, b = _probability.fit_sigmoid(dec, positive, w if weighted else None)
    # Platt's targets and the weighted negative log-likelihood, minimised generically.
    n1, n0 = w[positive].sum(), w[~positive].sum()
    t = np.where(positive, (n1 + 1) / (n1 + 2), 1 / (n0 + 2))

    def nll(ab):
        f = dec * ab[0] + ab[1]
        return np.sum(w * (t * f + np.logaddexp(0, -f)))

    ref = minimize(nll, x0=[0.0, 0.0], method="Nelder-Mead", options=dict(xatol=1e-10, fatol=1e-12, maxiter=20000))
    assert nll([a, b]) <= ref.fun + 1e-6 * (1 + abs(ref.fun))


def _svc(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return SVC(probability=True, **kw)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_kernel_svc_probabilities_agree_with_svc(n_classes):
    """Same problem, same method; only the random folds of the internal cross-validation differ.
    Measured on these problems: mean |difference| about 0.005, largest about 0.03."""
    X, y = (xor_data if n_classes == 2 else three_classes)(500, 3)
    Xt, yt, Xs = X[:350], y[:350], X[350:]
    ours = KernelSVC(C=2.0, gamma=2.0, tol=1e-5, probability=True, random_state=0).fit(Xt, yt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref = _svc(C=2.0, gamma=2.0, tol=1e-5, random_state=0).fit(Xt, yt)
        ref_proba = ref.predict_proba(Xs)
    diff = np.abs(ours.predict_proba(Xs) - ref_proba)
    assert diff.mean() < 0.02, diff.mean()
    assert diff.max() < 0.12, diff.max()


@pytest.mark.parametrize(
    "make",
    [
        lambda: BudgetSVC(C=2.0, gamma=2.0, budget=40, probability=True, random_state=0),
        lambda: BudgetSVC(C=2.0, gamma=2.0, budget=40, solver="bsca", probability=True, random_state=0),
        lambda: KernelSVC(C=2.0, gamma=2.0, probability=True, random_state=0),
    ],
    ids=["bsgd", "bsca", "kernel"],
)
@pytest.mark.parametrize("n_classes", [2, 3])
def test_probabilities_are_distributions_and_seeded(make, n_classes):
    X, y = (xor_data if n_classes == 2 else three_classes)(600, 5)
    clf = make().fit(X[:400], y[:400])
    p = clf.predict_proba(X[400:])
    assert p.shape == (200, n_classes)
    assert np.all(p >= 0) and np.all(p <= 1)
    assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    assert_allclose(clf.predict_log_proba(X[400:]), np.log(p))
    n_pairs = n_classes * (n_classes - 1) // 2
    assert clf.probA_.shape == clf.probB_.shape == (n_pairs,)
    assert np.all(clf.probA_ < 0)  # larger decision values, more likely the pair's first class
    assert clf.fit_stats_["probability_seconds"] > 0
    # Calibrated: on held-out rows the most probable class is mostly right, and its mean
    # probability is near the accuracy.
    top = p.max(axis=1)
    hit = clf.classes_[p.argmax(axis=1)] == y[400:]
    assert hit.mean() > 0.8
    assert abs(top.mean() - hit.mean()) < 0.1
    # The same random_state, the same probabilities.
    assert_array_equal(make().fit(X[:400], y[:400]).predict_proba(X[400:]), p)


@pytest.mark.parametrize("make", [BudgetSVC, KernelSVC])
def test_binary_probability_is_monotone_in_the_decision_value(make):
    X, y = xor_data(400, 8)
    clf = make(gamma=2.0, probability=True, random_state=1).fit(X, y)
    dec = clf.decision_function(X)
    p1 = clf.predict_proba(X)[:, 1]
    order = np.argsort(dec)
    assert np.all(np.diff(p1[order]) >= -1e-12)


@pytest.mark.parametrize("make", [BudgetSVC, KernelSVC])
def test_probability_off_means_no_predict_proba(make):
    X, y = xor_data(100, 0)
    clf = make().fit(X, y)
    assert not hasattr(clf, "predict_proba")
    with pytest.raises(AttributeError):
        clf.predict_proba(X)


@pytest.mark.parametrize("make", [BudgetSVC, KernelSVC])
def test_calibrated_classifier_cv_on_top(make):
    X, y = three_classes(600, 2)
    cal = CalibratedClassifierCV(make(gamma=2.0), cv=3).fit(X[:400], y[:400])
    p = cal.predict_proba(X[400:])
    assert_allclose(p.sum(axis=1), 1.0)
    assert np.mean(cal.predict(X[400:]) == y[400:]) > 0.8


def test_weights_reach_the_cross_validation():
    X, y = xor_data(400, 4)
    w = np.where(y == 1, 3.0, 1.0)
    a = KernelSVC(gamma=2.0, probability=True, random_state=0).fit(X, y, sample_weight=w)
    b = KernelSVC(gamma=2.0, probability=True, random_state=0, class_weight={1: 3.0}).fit(X, y)
    assert_array_equal(a.probA_, b.probA_)
    c = KernelSVC(gamma=2.0, probability=True, random_state=0).fit(X, y)
    assert not np.array_equal(a.probB_, c.probB_)


def test_streams_refuse_probability(tmp_path):
    X, y = xor_data(100, 0)
    assert not hasattr(BudgetSVC(probability=True), "partial_fit")
    with pytest.raises(ValueError, match="probability"):
        BudgetSVC(probability=True).fit_file(tmp_path / "missing.svm")


def test_model_files_keep_probabilities_and_class_weights(tmp_path):
    X, y = three_classes(400, 6)
    clf = BudgetSVC(
        gamma=2.0, budget=40, probability=True, class_weight={0: 2.0, 2: 0.5}, random_state=0
    ).fit(X, y)
    clf.save(tmp_path / "m.model")
    back = BudgetSVC.load(tmp_path / "m.model")
    assert_array_equal(back.predict_proba(X), clf.predict_proba(X))
    assert back.class_weight == {0: 2.0, 2: 0.5}
    assert_array_equal(back.class_weight_, clf.class_weight_)
