"""The nu machines (KernelNuSVC, KernelNuSVR): scikit-learn's NuSVC / NuSVR problems on the
exact engine (LIBSVM's Solver_NU: a sum per label), checked against scikit-learn itself (an
independent implementation of the same problem)."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import KernelNuSVC, KernelNuSVR, KernelSVC, load_model
from budgetsvm.kernel_svc import ExactClassifier
from conftest import expected_failures
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.datasets import make_classification, make_regression
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import NuSVC, NuSVR
from sklearn.utils.estimator_checks import parametrize_with_checks

SOLVERS = ("alfpgm", "smo")


def classes(n=300, k=2, seed=0):
    return make_classification(
        n_samples=n, n_features=6, n_informative=4, n_classes=k, random_state=seed
    )


def every_label_has_a_free_variable(model, sample_weight):
    """Whether each class pair's solution has, for both its labels, a variable strictly inside
    its box (0 < a_i < w_i; a_i = |coef_i| r from the C-SVC form coef = y a / r)."""
    start = np.r_[0, np.cumsum(model.n_support_)]
    bound = np.ones(int(start[-1])) if sample_weight is None else sample_weight[model.support_]
    coef = model._dense_dual_coef()
    k = len(model.classes_)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    for (a, b), r in zip(pairs, model.fit_stats_["r"]):
        for c, row in ((a, b - 1), (b, a)):
            alpha = np.abs(coef[row, start[c] : start[c + 1]]) * r
            upper = bound[start[c] : start[c + 1]]
            if not np.any((alpha > 1e-9 * upper) & (alpha < upper * (1 - 1e-9))):
                return False
    return True


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    k=st.sampled_from([2, 3]),
    nu=st.sampled_from([0.05, 0.2, 0.5, 0.7]),
    kernel=st.sampled_from(["rbf", "linear", "poly"]),
    solver=st.sampled_from(SOLVERS),
    shrinking=st.booleans(),
    weighted=st.booleans(),
)
def test_nu_svc_is_scikit_learn_s(seed, k, nu, kernel, solver, shrinking, weighted):
    X, y = classes(150, k, seed)
    w = np.random.default_rng(seed).uniform(0.2, 3.0, len(y)) if weighted else None
    common = dict(nu=nu, kernel=kernel, shrinking=shrinking, tol=1e-6)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            # LIBSVM's own cap is none: a nearly separable pair at a small nu can run forever.
            ref = NuSVC(max_iter=200_000, **common).fit(X, y, sample_weight=w)
    except ConvergenceWarning:
        assume(False)
    except ValueError as e:
        with pytest.raises(ValueError, match="specified nu is infeasible"):
            KernelNuSVC(solver=solver, **common).fit(X, y, sample_weight=w)
        assert "infeasible" in str(e)
        return
    ours = KernelNuSVC(solver=solver, **common).fit(X, y, sample_weight=w)
    # r near 0 is a margin of 0: 1 / r magnifies rounding, and scikit-learn divides by an r
    # that rounding made negative (its predictions then flip; ours stay unscaled).
    assume(min(ours.fit_stats_["r"]) > 1e-3)
    # A label of a pair without a free variable leaves that pair's rho (and its scale 1 / r)
    # anywhere in an interval: LIBSVM takes the middle, whose ends move with the alphas at the
    # bounds, so two optimal solutions may put the boundary apart (seed 196, three classes,
    # linear, nu = 0.7: 2 of 150 rows; seed 8580: the values 6% apart, an exact affine image).
    assume(every_label_has_a_free_variable(ours, w))
    assert (ours.predict(X) == ref.predict(X)).mean() >= 0.99
    # The pairwise values ('ovo': 'ovr' adds votes, which a row on a pair's boundary flips), up
    # to each pair's own affine map: the decision function's direction is unique, but where a
    # label of a pair has no free variable its rho, and with it the scale 1 / r, is any point
    # of an interval (LIBSVM takes the middle, whose ends move with the alphas at the bounds:
    # seed 8580, three classes, linear, nu = 0.7: 6% apart, an exact affine image).
    ours.set_params(decision_function_shape="ovo")
    ref.set_params(decision_function_shape="ovo")
    theirs, mine = ref.decision_function(X), ours.decision_function(X)
    theirs, mine = theirs.reshape(len(X), -1), mine.reshape(len(X), -1)
    scale = 1.0 + np.abs(theirs).max()
    for pair in range(theirs.shape[1]):
        A = np.c_[theirs[:, pair], np.ones(len(X))]
        (slope, shift), *_ = np.linalg.lstsq(A, mine[:, pair], rcond=None)
        assert 0.8 < slope < 1.25 and abs(shift) <= 0.1 * scale, (pair, slope, shift)
        assert np.abs(A @ [slope, shift] - mine[:, pair]).max() <= 2e-3 * scale, pair


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("nu", [0.1, 0.5, 0.9])
def test_nu_svr_is_scikit_learn_s(solver, nu):
    X, z = make_regression(n_samples=300, n_features=5, noise=10.0, random_state=1)
    z = z / z.std()
    w = np.random.default_rng(3).uniform(0.5, 2.0, len(z))
    for weights in (None, w):
        ours = KernelNuSVR(nu=nu, C=2.0, solver=solver, tol=1e-7).fit(X, z, sample_weight=weights)
        ref = NuSVR(nu=nu, C=2.0, tol=1e-7).fit(X, z, sample_weight=weights)
        assert_allclose(ours.predict(X), ref.predict(X), atol=1e-4)
        assert abs(ours.score(X, z) - ref.score(X, z)) < 1e-5
        # nu bounds the fraction of support vectors from below.
        assert len(ours.support_) >= nu * len(z) - 1


def test_nu_svr_takes_100_pairs_unless_told():
    # KernelNuSVR's own default of ALFPGM's n_pairs (the class docstring's measurements); a
    # given n_pairs, or another estimator, keeps the option's 50.
    X, z = make_regression(n_samples=600, n_features=5, noise=10.0, random_state=4)
    z = z / z.std()

    def fit(**options):
        return KernelNuSVR(nu=0.5, C=10.0, solver_options=options or None).fit(X, z)

    default, hundred, fifty = fit(), fit(n_pairs=100), fit(n_pairs=50)
    assert_array_equal(default.dual_coef_, hundred.dual_coef_)
    assert default.fit_stats_["working_sets"] == hundred.fit_stats_["working_sets"]
    assert default.fit_stats_["working_sets"] < fifty.fit_stats_["working_sets"]
    assert KernelNuSVR(solver_options=dict(n_pairs=7))._solver_params()["n_pairs"] == 7
    assert KernelNuSVR()._solver_params()["n_pairs"] == 100
    assert KernelNuSVC()._solver_params()["n_pairs"] == 50


def test_smo_takes_libsvm_s_steps():
    # The same selection, steps and stopping rule as LIBSVM's Solver_NU: the same model to
    # rounding (two classes: with more, the pairs' shared kernel rows round otherwise).
    X, y = classes(400, 2, 7)
    ours = KernelNuSVC(nu=0.3, solver="smo").fit(X, y)
    ref = NuSVC(nu=0.3).fit(X, y)
    assert_array_equal(ours.support_, ref.support_)
    assert_allclose(ours.dual_coef_, ref.dual_coef_, atol=1e-9)
    assert abs(int(ours.n_iter_[0]) - int(ref.n_iter_[0])) <= 0.05 * ref.n_iter_[0]


def test_infeasible_nu_names_the_pair():
    X, y = classes(200, 3, 2)
    keep = (y != 2) | (np.arange(len(y)) % 10 == 0)
    X, y = X[keep], y[keep]
    with pytest.raises(ValueError, match="specified nu is infeasible.*classes 0 and 2|"
                       "specified nu is infeasible.*classes 1 and 2"):
        KernelNuSVC(nu=0.9).fit(X, y)
    with pytest.raises(ValueError, match="infeasible"):
        NuSVC(nu=0.9).fit(X, y)
    # One class left by the weights: infeasible too, as NuSVC says.
    w = np.where(y == 0, 1.0, -1.0)
    with pytest.raises(ValueError, match="specified nu is infeasible"):
        KernelNuSVC().fit(X, y, sample_weight=w)


@pytest.mark.parametrize("est", [KernelNuSVC(), KernelNuSVR()])
@pytest.mark.parametrize("nu", [0.0, -0.1, 1.5, np.nan, "0.5", True])
def test_bad_nu_is_a_clear_error(est, nu):
    X, y = classes(50)
    with pytest.raises(ValueError, match="nu must be"):
        est.set_params(nu=nu).fit(X, y)


def test_nu_one_is_an_error_or_a_model_that_predicts_as_in_scikit_learn():
    X, y = classes(200, 2, 4)
    y[:100] = 0
    y[100:] = 1
    # Classes of equal weight: every variable at its bound, r unbounded: an error at fit.
    est = KernelNuSVC(nu=1.0)
    with pytest.raises(ValueError, match="The dual coefficients or intercepts are not finite"):
        est.fit(X, y)
    assert not hasattr(est, "support_")
    with pytest.raises(ValueError, match="not finite"):
        NuSVC(nu=1.0).fit(X, y)
    # Unequal classes: a model, as NuSVC's.
    y[:90] = 0
    y[90:] = 1
    with pytest.raises(ValueError, match="infeasible"):
        KernelNuSVC(nu=1.0).fit(X, y)
    reg = KernelNuSVR(nu=1.0, tol=1e-7).fit(X, X[:, 0])
    ref = NuSVR(nu=1.0, tol=1e-7).fit(X, X[:, 0])
    assert_allclose(reg.predict(X), ref.predict(X), atol=1e-4)


def test_class_weight_does_not_change_the_problem_as_in_scikit_learn():
    X, y = classes(200)
    plain = KernelNuSVC(nu=0.3, tol=1e-6).fit(X, y)
    weighted = KernelNuSVC(nu=0.3, tol=1e-6, class_weight={0: 3.0}).fit(X, y)
    assert_allclose(weighted.decision_function(X), plain.decision_function(X))
    assert_allclose(weighted.class_weight_, [3.0, 1.0])
    assert_allclose(
        weighted.decision_function(X),
        NuSVC(nu=0.3, tol=1e-6, class_weight={0: 3.0}).fit(X, y).decision_function(X),
        atol=1e-3,
    )


@pytest.mark.parametrize("cls", [KernelNuSVC, KernelNuSVR])
def test_sparse_pickle_and_model_files(cls, tmp_path):
    X, y = classes(200, 3 if cls is KernelNuSVC else 2, 5)
    target = y if cls is KernelNuSVC else X[:, 0] + 0.1 * y
    dense = cls(nu=0.4).fit(X, target)
    sparse = cls(nu=0.4).fit(sp.csr_matrix(X), target)
    assert sp.issparse(sparse.dual_coef_)
    assert_allclose(sparse.dual_coef_.toarray(), dense.dual_coef_, atol=1e-9)
    assert_allclose(sparse.predict(X), dense.predict(X))
    for est in (dense, sparse):
        back = pickle.loads(pickle.dumps(est))
        assert_array_equal(back.predict(X), est.predict(X))
        path = tmp_path / "m.bsvm"
        est.save(path)
        loaded = load_model(path)
        assert type(loaded) is cls
        assert loaded.nu == 0.4
        assert_array_equal(loaded.predict(X), est.predict(X))


def test_probability_and_shapes_as_nu_svc():
    X, y = classes(300, 3, 6)
    clf = KernelNuSVC(nu=0.3, probability=True, random_state=0).fit(X, y)
    proba = clf.predict_proba(X)
    assert proba.shape == (300, 3)
    assert_allclose(proba.sum(1), 1.0)
    assert clf.decision_function(X).shape == (300, 3)
    clf.set_params(decision_function_shape="ovo")
    assert clf.decision_function(X).shape == (300, 3)
    # KernelSVC's machinery without its C, as NuSVC beside SVC.
    assert isinstance(clf, ExactClassifier) and not isinstance(clf, KernelSVC)


def nu_expected_failures(estimator) -> dict:
    failures = expected_failures(estimator)
    if isinstance(estimator, KernelNuSVC):
        # As scikit-learn's NuSVC (its own expected failure): nu-SVC has no C to weigh.
        failures["check_class_weight_classifiers"] = "class_weight is ignored, as in NuSVC"
    return failures


def test_random_labels_give_a_model_that_predicts():
    # No separation at all (r = 0 up to rounding): unscaled coefficients, finite predictions.
    rng = np.random.RandomState(0)
    X = rng.normal(size=(100, 2))
    y = rng.randint(0, 2, 100)
    clf = KernelNuSVC(kernel="linear").fit(X, y)
    assert abs(clf.fit_stats_["r"][0]) < 1e-4
    assert np.all(np.isfinite(clf.decision_function(X)))
    assert np.all(np.isfinite(clf.dual_coef_))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
@parametrize_with_checks(
    [KernelNuSVC(), KernelNuSVC(kernel="linear", solver="smo"), KernelNuSVR(),
     KernelNuSVR(kernel="poly", solver="smo")],
    expected_failed_checks=nu_expected_failures,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("solver", ["alfpgm", "smo"])
@pytest.mark.parametrize("form", ["precomputed", "callable"])
def test_a_kernel_that_is_not_psd_predicts_as_nu_svc(solver, form):
    # -K of a Gaussian kernel: nu-SVC's multiplier r comes out far below 0 (-7.45 here). LIBSVM
    # divides by it whatever its sign; keeping the coefficients unscaled flipped every
    # prediction (training accuracy 0.18 against NuSVC's 0.82).
    from sklearn.metrics.pairwise import rbf_kernel

    X, y = make_classification(
        300, n_features=5, n_informative=3, n_redundant=0, n_clusters_per_class=1,
        random_state=1,
    )
    K = -rbf_kernel(X, X, gamma=0.5)
    ref = NuSVC(kernel="precomputed").fit(K, y)
    if form == "precomputed":
        ours = KernelNuSVC(kernel="precomputed", solver=solver).fit(K, y)
        data = K
    else:
        ours = KernelNuSVC(kernel=lambda A, B: -rbf_kernel(A, B, gamma=0.5), solver=solver)
        ours.fit(X, y)
        data = X
    assert ours.fit_stats_["r"][0] < -1.0
    assert_array_equal(ours.predict(data), ref.predict(K))
    assert_allclose(ours.decision_function(data), ref.decision_function(K), atol=1e-2)


def test_a_feasible_nu_is_fitted_with_probabilities():
    # 80 / 20 rows: the largest feasible nu is 0.4. The internal cross-validation's folds are
    # stratified (and a fold's nu kept feasible), so nu = 0.39 fits with probabilities as
    # without them; random folds gave training folds of 67 / 13 rows, where 0.39 is infeasible.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    y = np.r_[np.zeros(80), np.ones(20)]
    X[y == 1] += 1.0
    for seed in range(5):
        clf = KernelNuSVC(nu=0.39, probability=True, random_state=seed).fit(X, y)
        plain = KernelNuSVC(nu=0.39).fit(X, y)
        assert_array_equal(clf.predict(X), plain.predict(X))
        proba = clf.predict_proba(X)
        assert_allclose(proba.sum(axis=1), 1.0)
        # The sigmoid is fitted on informative held-out values (NuSVC's folds here are
        # infeasible and its sigmoid flat: probA_ = 0).
        assert clf.probA_[0] < -0.5
        assert np.mean(np.argmax(proba, axis=1) == plain.predict(X)) > 0.9


def test_the_folds_of_probability_keep_every_class_share():
    from budgetsvm._probability import stratified_folds

    y = np.r_[np.zeros(81, dtype=int), np.ones(19, dtype=int), np.full(3, 2)]
    folds = stratified_folds(y, 5, seed=3)
    tests = np.sort(np.concatenate([test for _, test in folds]))
    assert_array_equal(tests, np.arange(len(y)))  # every row held out exactly once
    for train, test in folds:
        assert len(np.intersect1d(train, test)) == 0
        for c, total in enumerate(np.bincount(y)):
            # each fold holds out a class's rows in its share, give or take one row
            assert abs(np.sum(y[test] == c) - total / 5) < 1


def test_an_infinite_c_is_refused_by_nu_svr_naming_why():
    X, y = make_regression(50, 3, random_state=0)
    with pytest.raises(ValueError, match="C must be finite for nu-SVR"):
        KernelNuSVR(C=np.inf).fit(X, y)
    with pytest.raises(ValueError, match="C must be finite for nu-SVR"):
        KernelNuSVR(C=2**2000).fit(X, y)  # an int beyond float64 is inf to the engine
