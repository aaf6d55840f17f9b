"""Every bad input raises a clear exception; no input brings the interpreter down."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import BudgetSVC, BudgetSVR, KernelNuSVC, KernelOneClassSVM, KernelSVC, KernelSVR
from conftest import xor_data
from numpy.testing import assert_array_equal
from sklearn.exceptions import NotFittedError

MAINTENANCE_VARIANTS = [
    dict(maintenance="merge", merge="lookup-wd"),
    dict(maintenance="merge", merge="gss"),
    dict(maintenance="remove"),
    dict(maintenance="project"),
]


@pytest.fixture
def data():
    return xor_data(60, seed=40)


# --- data ---------------------------------------------------------------------------------------


def test_nan_in_x(data):
    X, y = data
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        BudgetSVC().fit(X, y)


def test_inf_in_x(data):
    X, y = data
    X[3, 1] = -np.inf
    with pytest.raises(ValueError, match="infinity"):
        BudgetSVC().fit(X, y)


def test_nan_in_sparse_x_data(data):
    X, y = data
    Xs = sp.csr_matrix(X)
    Xs.data[5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        BudgetSVC().fit(Xs, y)


def test_nan_in_predict_input(data):
    X, y = data
    clf = BudgetSVC(budget=10, random_state=0).fit(X, y)
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clf.predict(X)
    with pytest.raises(ValueError, match="NaN"):
        clf.decision_function(sp.csr_matrix(X))


def test_x_y_length_mismatch(data):
    X, y = data
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        BudgetSVC().fit(X, y[:-1])


def test_empty_x():
    with pytest.raises(ValueError, match="0 sample"):
        BudgetSVC().fit(np.empty((0, 2)), np.empty(0))


def test_zero_features(data):
    _, y = data
    with pytest.raises(ValueError, match="0 feature"):
        BudgetSVC().fit(np.empty((len(y), 0)), y)


def test_one_class_only(data):
    X, _ = data
    with pytest.raises(ValueError, match="class"):
        BudgetSVC().fit(X, np.ones(len(X)))


def test_continuous_target(data):
    X, _ = data
    y = np.random.default_rng(0).normal(size=len(X))
    with pytest.raises(ValueError, match="continuous"):
        BudgetSVC().fit(X, y)


def test_nan_in_y(data):
    X, y = data
    y = y.astype(float)
    y[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        BudgetSVC().fit(X, y)


def test_2d_y(data):
    X, y = data
    with pytest.raises(ValueError, match="1d array"):
        BudgetSVC().fit(X, np.c_[y, y])


def test_1d_x(data):
    X, y = data
    with pytest.raises(ValueError, match="Expected 2D array"):
        BudgetSVC().fit(X[:, 0], y)


def test_3d_x(data):
    X, y = data
    with pytest.raises(ValueError, match="dim 3"):
        BudgetSVC().fit(X[:, :, None], y)


def test_complex_x(data):
    X, y = data
    with pytest.raises(ValueError, match="Complex"):
        BudgetSVC().fit(X + 1j, y)


def test_string_x(data):
    _, y = data
    with pytest.raises(ValueError, match="convert string to float"):
        BudgetSVC().fit(np.full((len(y), 2), "a"), y)


@pytest.mark.parametrize("sparse", [False, True])
def test_predict_with_different_number_of_features(data, sparse):
    X, y = data
    clf = BudgetSVC(budget=10, random_state=0).fit(X, y)
    X_wide = np.hstack([X, X])
    if sparse:
        X_wide = sp.csr_matrix(X_wide)
    with pytest.raises(ValueError, match="features"):
        clf.predict(X_wide)
    with pytest.raises(ValueError, match="features"):
        clf.decision_function(X[:, :1])


def test_predict_before_fit(data):
    X, _ = data
    with pytest.raises(NotFittedError):
        BudgetSVC().predict(X)
    with pytest.raises(NotFittedError):
        BudgetSVC().decision_function(X)


def test_a_failed_fit_leaves_the_previous_model():
    X, y = xor_data(500, 4)
    clf = BudgetSVC(budget=20, epochs=2, random_state=0).fit(X, y)
    before = clf.decision_function(X)
    classes, n_features = clf.classes_.copy(), clf.n_features_in_
    wide = np.hstack([X, X])
    with pytest.raises(ValueError, match="one class"):
        clf.fit(wide, np.zeros(len(y)))  # passes validation, fails after classes_ would be set
    assert_array_equal(clf.classes_, classes)
    assert clf.n_features_in_ == n_features
    assert_array_equal(clf.decision_function(X), before)
    kernel = KernelSVC(C=1.0, gamma=1.0).fit(X, y)
    kbefore = kernel.decision_function(X)
    with pytest.raises(ValueError):
        kernel.fit(wide, np.zeros(len(y)))
    assert_array_equal(kernel.decision_function(X), kbefore)


# --- hyper-parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(C=0.0), "C must be"),
        (dict(C=-1.0), "C must be"),
        (dict(C=np.nan), "C must be"),
        (dict(C=np.inf), "C must be"),
        (dict(C="1.0"), "C must be a number"),
        (dict(C=None), "C must be a number"),
        (dict(gamma=-0.5), "gamma must be"),
        (dict(gamma=0.0), "gamma must be"),
        (dict(gamma=np.nan), "gamma must be"),
        (dict(gamma="bogus"), "gamma must be"),
        (dict(budget=1), "budget"),
        (dict(budget=0), "budget"),
        (dict(budget=2.5), "budget must be an integer"),
        (dict(budget=True), "budget must be an integer"),
        (dict(epochs=0), "epochs"),
        (dict(epochs=1.5), "epochs must be an integer"),
        (dict(solver="smo"), "solver"),
        (dict(maintenance="shrink"), "maintenance"),
        (dict(merge="bisect"), "merge"),
        (dict(random_state=-1), "random_state"),
        (dict(average="yes"), "average"),
        (dict(average=None), "average"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else "",
)
def test_bad_hyper_parameter(data, params, match):
    X, y = data
    clf = BudgetSVC(**params)  # __init__ stores, fit validates
    with pytest.raises(ValueError, match=match):
        clf.fit(X, y)


def test_numpy_integer_parameters_accepted(data):
    X, y = data
    clf = BudgetSVC(budget=np.int64(10), epochs=np.int32(2), C=np.float32(2.0), random_state=0)
    clf.fit(X, y)
    assert clf.support_vectors_.shape[0] <= 10


# --- nasty inputs: fit with finite decision values, or a ValueError -----------------------------


def _nasty_cases():
    X, y = xor_data(60, seed=41)
    rng = np.random.default_rng(42)
    return {
        "gamma-1e300": (X, y, dict(gamma=1e300)),
        "gamma-1e-300": (X, y, dict(gamma=1e-300)),
        "identical-rows": (np.ones((60, 3)), y, {}),
        "identical-rows-sparse": (sp.csr_matrix(np.ones((60, 3))), y, {}),
        "all-zero-sparse": (sp.csr_matrix((60, 4)), y, {}),
        "one-row-per-class": (X[:2], np.array([0, 1]), {}),
        "one-row-per-class-3": (X[:3], np.array([0, 1, 2]), {}),
        "values-1e150": (X * 1e150, y, {}),
        "values-1e150-gamma-1": (X * 1e150, y, dict(gamma=1.0)),
        "values-1e150-sparse": (sp.csr_matrix(X * 1e150), y, {}),
        "values-1e-300": (X * 1e-300, y, {}),
        "C-1e300": (X, y, dict(C=1e300)),
        "C-1e-300": (X, y, dict(C=1e-300)),
        "mixed-scales": (X * np.array([1e-150, 1e150]), y, {}),
        "wide": (rng.normal(size=(5, 2000)), np.array([0, 1, 0, 1, 1]), {}),
        "budget-2-multiclass": (X, np.arange(60) % 5, dict(budget=2)),
    }


NASTY = _nasty_cases()


@pytest.mark.parametrize("name", sorted(NASTY))
@pytest.mark.parametrize("variant", MAINTENANCE_VARIANTS, ids=lambda v: "-".join(v.values()))
def test_nasty_input_fits_or_raises_value_error(name, variant):
    X, y, params = NASTY[name]
    params = {"budget": 5, **params}
    clf = BudgetSVC(epochs=2, random_state=0, **params, **variant)
    try:
        clf.fit(X, y)
    except ValueError:
        return
    assert np.isfinite(clf.gamma_) and clf.gamma_ > 0
    assert np.all(np.isfinite(clf.support_vectors_))
    assert np.all(np.isfinite(clf.dual_coef_))
    values = clf.decision_function(X)
    assert np.all(np.isfinite(values))
    assert set(clf.predict(X)) <= set(np.unique(y))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_gamma_scale_with_overflowing_variance(sparse):
    # Finite values whose variance overflows (1e200^2 = inf; the true 'scale' gamma, ~1e-400,
    # underflows). Fitting must either work with a positive gamma_ or raise a ValueError that names
    # the cause -- not leak numpy's overflow RuntimeWarning (an error under this suite's
    # filterwarnings) nor hand gamma = 1/inf = 0 to the engine, whose message then blames a gamma
    # the user never set.
    X, y = xor_data(60, seed=43)
    X = X * 1e200
    clf = BudgetSVC(budget=5, epochs=2, random_state=0)
    try:
        clf.fit(sp.csr_matrix(X) if sparse else X, y)
    except ValueError as exc:
        assert "scale" in str(exc) or "variance" in str(exc), str(exc)
        return
    assert np.isfinite(clf.gamma_) and clf.gamma_ > 0
    assert np.all(np.isfinite(clf.decision_function(X)))


# --- numbers beyond numpy's and the engine's range -----------------------------------------------

HUGE_INT = 2**70
BEYOND_FLOAT = 2**2000


@pytest.mark.parametrize(
    "make, params",
    [
        (BudgetSVC, dict(budget=2**64)),
        (BudgetSVC, dict(budget=np.uint64(2**63))),
        (BudgetSVC, dict(epochs=HUGE_INT)),
        (BudgetSVC, dict(polish_max_iter=HUGE_INT)),
        (BudgetSVC, dict(random_state=HUGE_INT)),
        (BudgetSVC, dict(C=BEYOND_FLOAT)),
        (BudgetSVC, dict(gamma=BEYOND_FLOAT)),
        (BudgetSVC, dict(lam=BEYOND_FLOAT)),
        (BudgetSVC, dict(polish_tol=BEYOND_FLOAT)),
        (BudgetSVC, dict(polish_cache_size=BEYOND_FLOAT)),
        (BudgetSVC, dict(n_jobs=HUGE_INT)),
        (BudgetSVR, dict(budget=2**64)),
        (BudgetSVR, dict(epsilon=BEYOND_FLOAT)),
        (KernelSVC, dict(max_iter=HUGE_INT)),
        (KernelSVC, dict(tol=BEYOND_FLOAT)),
        (KernelSVC, dict(cache_size=BEYOND_FLOAT)),
        (KernelSVC, dict(kernel="poly", degree=HUGE_INT)),
        (KernelSVC, dict(kernel="poly", coef0=BEYOND_FLOAT)),
        (KernelSVC, dict(solver_options={"n_pairs": HUGE_INT})),
        (KernelSVR, dict(epsilon=BEYOND_FLOAT)),
        (KernelNuSVC, dict(nu=BEYOND_FLOAT)),
        (KernelOneClassSVM, dict(nu=HUGE_INT)),
    ],
    ids=lambda v: repr(v)[:40] if isinstance(v, dict) else v.__name__,
)
def test_numbers_too_large_are_a_value_error_naming_the_parameter(make, params):
    X, y = xor_data(40, seed=3)
    if make in (BudgetSVR, KernelSVR):
        y = X[:, 0] + X[:, 1]
    (name,) = [k for k in params if k not in ("kernel",)]
    shown = {"solver_options": "n_pairs"}.get(name, name)
    with pytest.raises(ValueError, match=shown):
        make(**params).fit(X) if make is KernelOneClassSVM else make(**params).fit(X, y)


def test_a_c_beyond_float_is_the_hard_margin_of_the_exact_svc():
    X, y = xor_data(40, seed=3)
    hard = KernelSVC(C=np.inf, gamma=1.0).fit(X, y)
    huge = KernelSVC(C=BEYOND_FLOAT, gamma=1.0).fit(X, y)
    assert_array_equal(huge.dual_coef_, hard.dual_coef_)


@pytest.mark.parametrize("budget", [2**31, 2**40, 2**62])
@pytest.mark.parametrize("solver", ["bsgd", "bsca"])
def test_huge_budgets_cost_nothing(budget, solver):
    # The store grows with the support vectors that exist, never with the budget asked for.
    X, y = xor_data(300, 8)
    clf = BudgetSVC(budget=budget, epochs=1, solver=solver, random_state=0).fit(X, y)
    assert clf.support_vectors_.shape[0] <= 300
    assert clf.score(X, y) > 0.5


@pytest.mark.parametrize("n_classes", [2**20 + 1, 2**40])
def test_native_entry_points_refuse_absurd_class_counts(n_classes):
    from budgetsvm import _budgetsvm

    X, y = xor_data(50, 9)
    common = dict(c=1.0, gamma=1.0, budget=10, maintenance="merge", merge="lookup-wd", seed=0)
    with pytest.raises(ValueError, match="classes"):
        _budgetsvm.BsgdStream(2, n_classes, n_samples=50, **common)
    with pytest.raises(ValueError, match="classes"):
        _budgetsvm.fit_bsgd(X, y.astype(np.uint32), n_classes, epochs=1, **common)
    with pytest.raises(ValueError, match="classes"):
        _budgetsvm.fit_bsca(X, y.astype(np.uint32), n_classes, epochs=1, **common)
    with pytest.raises(ValueError, match="classes"):
        _budgetsvm.fit_exact(X, y.astype(np.uint32), problem="svc", n_classes=n_classes, c=1.0, gamma=1.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: BudgetSVC(gamma=1e-308, random_state=0),
        lambda: BudgetSVC(gamma=1e-308, solver="bsca", random_state=0),
        lambda: KernelSVC(gamma=1e-308),
    ],
    ids=["bsgd", "bsca", "kernel"],
)
def test_norms_whose_sum_overflows_are_refused_not_nan(make):
    # Rows with |x|^2 near 1.7e308 are finite, but |x|^2 + |z|^2 overflows and the kernel value
    # came out NaN for every such pair: refused with the row named, in fit and in predict.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    X /= np.linalg.norm(X, axis=1)[:, None]
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match="squared norm .* rescale"):
        make().fit(X * 1.3e154, y)
    clf = make().fit(X * 1e150, y)
    assert np.all(np.isfinite(clf.decision_function(X * 1e150)))
    with pytest.raises(ValueError, match="squared norm .* rescale"):
        clf.decision_function(X[:3] * 1.3e154)
