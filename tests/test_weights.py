"""Sample and class weights in every solver: C of row i is C * sample_weight[i] *
class_weight[y_i] (SVC's meaning), rows of weight 0 are left out, and every entry point
(fit, partial_fit, fit_file, the exact solver) takes them. Checked against independent
formulations: removed rows, repeated rows at the optimum, scikit-learn's SVC."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import BudgetSVC, KernelSVC
from conftest import xor_data
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.datasets import dump_svmlight_file
from sklearn.metrics import balanced_accuracy_score
from sklearn.svm import SVC

BUDGETED = [
    dict(solver="bsgd"),
    dict(solver="bsca"),
    dict(solver="bsgd", maintenance="project"),
    dict(solver="bsca", merge="gss"),
]
BUDGETED_IDS = ["bsgd", "bsca", "bsgd-project", "bsca-gss"]


def three_classes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    X, y = xor_data(n, seed)
    return X, np.where(X[:, 0] > 0.5, 2, y)


def estimators(kind: str):
    if kind == "kernel":
        return KernelSVC(C=3.0, gamma=2.0)
    return BudgetSVC(C=3.0, gamma=2.0, budget=30, epochs=2, random_state=5, solver=kind)


@settings(max_examples=15)
@given(
    seed=st.integers(0, 10_000),
    kind=st.sampled_from(["bsgd", "bsca", "kernel"]),
    n_classes=st.sampled_from([2, 3]),
    sparse=st.booleans(),
)
def test_zero_weights_are_removed_rows(seed, kind, n_classes, sparse):
    X, y = (xor_data if n_classes == 2 else three_classes)(120, seed)
    rng = np.random.default_rng(seed)
    w = rng.choice([0.0, 0.5, 1.0, 3.0], size=len(y), p=[0.3, 0.2, 0.3, 0.2])
    w[:6] = 1.0  # both classes keep rows
    w[np.flatnonzero(y == y.max())[:3]] = 1.0
    kept = np.flatnonzero(w > 0)
    X_in = sp.csr_matrix(X) if sparse else X
    a = estimators(kind).fit(X_in, y, sample_weight=w)
    b = estimators(kind).fit(X_in[kept], y[kept], sample_weight=w[kept])
    assert_array_equal(a.classes_, b.classes_)
    assert_array_equal(a.decision_function(X), b.decision_function(X))
    if kind == "kernel":
        assert_array_equal(a.support_, kept[b.support_])


def test_a_class_with_only_zero_weights_is_not_a_class():
    X, y = three_classes(150, 1)
    w = np.where(y == 2, 0.0, 1.0)
    for est in (BudgetSVC(random_state=0), KernelSVC()):
        est.fit(X, y, sample_weight=w)
        assert_array_equal(est.classes_, [0, 1])


@pytest.mark.parametrize("params", BUDGETED + [dict(kernel=True)], ids=BUDGETED_IDS + ["kernel"])
def test_class_weight_is_a_per_class_sample_weight(params):
    X, y = three_classes(200, 3)
    cw = {0: 2.0, 2: 0.25}
    if params.get("kernel"):
        make = lambda **kw: KernelSVC(C=2.0, gamma=2.0, **kw)  # noqa: E731
    else:
        make = lambda **kw: BudgetSVC(  # noqa: E731
            C=2.0, gamma=2.0, budget=25, epochs=2, random_state=1, **params, **kw
        )
    a = make(class_weight=cw).fit(X, y)
    w = np.array([cw.get(c, 1.0) for c in y])
    b = make().fit(X, y, sample_weight=w)
    assert_array_equal(a.decision_function(X), b.decision_function(X))
    assert_array_equal(a.class_weight_, [2.0, 1.0, 0.25])
    # 'balanced': n / (k * count), from the weighted counts.
    c = make(class_weight="balanced").fit(X, y)
    counts = np.bincount(y)
    assert_allclose(c.class_weight_, len(y) / (3 * counts))


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("solver", ["smo", "alfpgm"])
def test_exact_solver_weights_match_svc(solver, n_classes):
    """The weighted dual (box [0, C w_i]) against LIBSVM's, through scikit-learn's SVC."""
    X, y = (xor_data if n_classes == 2 else three_classes)(160, 11)
    w = np.random.default_rng(2).uniform(0.2, 4.0, size=len(y))
    ours = KernelSVC(C=2.0, gamma=1.5, tol=1e-6, solver=solver).fit(X, y, sample_weight=w)
    ref = SVC(C=2.0, gamma=1.5, tol=1e-6).fit(X, y, sample_weight=w)
    assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=2e-3)
    assert_allclose(ours.dual_objective_, -_svc_objective(ref, X, y, w, 2.0, 1.5), rtol=1e-4)


def _svc_objective(svc, X, y, w, C, gamma):
    """LIBSVM's dual objective of each pair from SVC's coefficients (sum a - 1/2 a^T Q a, negated)."""
    out = []
    classes = svc.classes_
    starts = np.r_[0, np.cumsum(svc.n_support_)]
    sv = svc.support_vectors_
    k = len(classes)
    for a in range(k):
        for b in range(a + 1, k):
            idx = np.r_[starts[a] : starts[a + 1], starts[b] : starts[b + 1]]
            coef = np.r_[
                svc.dual_coef_[b - 1, starts[a] : starts[a + 1]],
                svc.dual_coef_[a, starts[b] : starts[b + 1]],
            ]
            d2 = ((sv[idx][:, None, :] - sv[idx][None, :, :]) ** 2).sum(-1)
            K = np.exp(-gamma * d2)
            out.append(0.5 * coef @ K @ coef - np.abs(coef).sum())
    return np.array(out)


def test_integer_weights_are_repetition_at_the_optimum():
    X, y = xor_data(60, 4)
    w = np.random.default_rng(0).integers(1, 4, size=len(y))
    rep = np.repeat(np.arange(len(y)), w)
    # Exact solver to a tight tol.
    a = KernelSVC(C=1.0, gamma=2.0, tol=1e-7, solver="smo").fit(X, y, sample_weight=w)
    b = KernelSVC(C=1.0, gamma=2.0, tol=1e-7, solver="smo").fit(X[rep], y[rep])
    assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-5)
    # BSCA without a binding budget solves the same dual (no bias) by coordinate ascent.
    bsca = dict(C=1.0, gamma=2.0, solver="bsca", budget=400, epochs=300, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = BudgetSVC(**bsca).fit(X, y, sample_weight=w.astype(float))
        d = BudgetSVC(**bsca).fit(X[rep], y[rep])
    assert_allclose(c.decision_function(X), d.decision_function(X), atol=2e-3)


def test_bsgd_weight_scales_c():
    """Weight s on every row is C s (steps s / (lambda t)), up to rounding, while the budget does
    not bind."""
    X, y = xor_data(300, 8)
    kw = dict(gamma=2.0, budget=400, epochs=2, random_state=3)
    a = BudgetSVC(C=1.0, **kw).fit(X, y, sample_weight=np.full(len(y), 4.0))
    b = BudgetSVC(C=4.0, **kw).fit(X, y)
    assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("model", ["bsgd", "bsca", "kernel"])
def test_balanced_class_weight_helps_the_rare_class(model):
    rng = np.random.default_rng(0)
    n = 3000
    X = rng.normal(size=(n, 2))
    # 5% positives, overlapping the negatives: unweighted training favours the majority.
    y = (X[:, 0] + 0.7 * rng.normal(size=n) > 1.9).astype(int)
    assert 0.02 < y.mean() < 0.08
    Xt, yt, Xs, ys = X[:2000], y[:2000], X[2000:], y[2000:]
    if model == "kernel":
        make = lambda **kw: KernelSVC(C=1.0, gamma=0.5, **kw)  # noqa: E731
    else:
        make = lambda **kw: BudgetSVC(  # noqa: E731
            C=1.0, gamma=0.5, budget=50, solver=model, random_state=0, **kw
        )
    plain = balanced_accuracy_score(ys, make().fit(Xt, yt).predict(Xs))
    balanced = balanced_accuracy_score(ys, make(class_weight="balanced").fit(Xt, yt).predict(Xs))
    assert balanced > plain + 0.05, (plain, balanced)


def test_partial_fit_weights():
    X, y = xor_data(400, 6)
    w = np.random.default_rng(1).choice([0.0, 1.0, 2.0], size=len(y))
    kept = w > 0
    kw = dict(C=2.0, gamma=2.0, budget=20, random_state=0, shuffle=False)
    a = BudgetSVC(**kw)
    b = BudgetSVC(**kw)
    for lo in range(0, 400, 100):
        sl = slice(lo, lo + 100)
        a.partial_fit(X[sl], y[sl], classes=[0, 1], sample_weight=w[sl], n_samples=int(kept.sum()))
        m = kept[sl]
        b.partial_fit(
            X[sl][m], y[sl][m], classes=[0, 1], sample_weight=w[sl][m], n_samples=int(kept.sum())
        )
    assert_array_equal(a.decision_function(X), b.decision_function(X))
    # A class_weight dict is a per-class sample weight here too.
    c = BudgetSVC(class_weight={1: 2.0}, **kw).partial_fit(X, y, classes=[0, 1])
    d = BudgetSVC(**kw).partial_fit(X, y, classes=[0, 1], sample_weight=np.where(y == 1, 2.0, 1.0))
    assert_array_equal(c.decision_function(X), d.decision_function(X))
    with pytest.raises(ValueError, match="balanced"):
        BudgetSVC(class_weight="balanced").partial_fit(X, y, classes=[0, 1])


@pytest.mark.parametrize("class_weight", [{1: 3.0}, "balanced"])
def test_fit_file_class_weight_equals_fit(tmp_path, class_weight):
    X, y = xor_data(300, 9)
    y = np.where(np.arange(300) % 4 == 0, 1, y)
    path = tmp_path / "train.svm"
    dump_svmlight_file(X, y, str(path), zero_based=False)
    kw = dict(C=2.0, gamma=2.0, budget=20, epochs=2, random_state=0, shuffle=False)
    a = BudgetSVC(class_weight=class_weight, **kw).fit_file(path, chunk_rows=70)
    b = BudgetSVC(class_weight=class_weight, **kw).fit(X, y.astype(float))
    assert_allclose(a.class_weight_, b.class_weight_)
    # dump_svmlight_file writes 16 significant digits, so the file's rows differ from X in the
    # last bit, which the polish's Newton solve amplifies a little.
    assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("make", [lambda: BudgetSVC(), lambda: KernelSVC()], ids=["budget", "kernel"])
@pytest.mark.parametrize(
    "weights, match",
    [
        (lambda n: -np.ones(n), "[Nn]egative"),
        (lambda n: np.full(n, np.nan), "NaN"),
        (lambda n: np.full(n, np.inf), "inf|infinity"),
        (lambda n: np.ones(n - 1), "shape"),
        (lambda n: np.zeros(n), "zero"),
    ],
)
def test_bad_sample_weights_are_named(make, weights, match):
    X, y = xor_data(50, 0)
    w = weights(len(y))
    w_before = w.copy()
    with pytest.raises(ValueError, match=match):
        make().fit(X, y, sample_weight=w)
    assert_array_equal(w, w_before)


@pytest.mark.parametrize("make", [lambda **k: BudgetSVC(**k), lambda **k: KernelSVC(**k)])
def test_bad_class_weights_are_named(make):
    X, y = xor_data(50, 0)
    for bad in ({0: 0.0}, {0: -1.0}, {0: np.nan}, "heavy", [1.0, 2.0]):
        with pytest.raises(ValueError, match="class_weight"):
            make(class_weight=bad).fit(X, y)
    with pytest.raises(ValueError, match="class"):
        make().fit(X, y, sample_weight=(y == 1).astype(float))


@pytest.mark.parametrize("solver", ["bsgd", "bsca"])
def test_n_jobs_gives_the_same_model(solver):
    X, y = three_classes(600, 2)
    models = [
        BudgetSVC(solver=solver, budget=30, random_state=0, n_jobs=n).fit(X, y)
        for n in (None, 1, 2, -1)
    ]
    for m in models[1:]:
        assert_array_equal(m.decision_function(X), models[0].decision_function(X))
    for bad in (0, -2, 1.5, True, 10**6):
        with pytest.raises(ValueError, match="n_jobs|threads"):
            BudgetSVC(n_jobs=bad).fit(X, y)
