"""Model files of the exact kernel machines (KernelSVC, KernelSVR, KernelOneClassSVM, format
version 5): round trips for every kernel, problem and input storage, and broken files."""

from __future__ import annotations

import json
import pickle
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import (
    BudgetSVC,
    KernelOneClassSVM,
    KernelSVC,
    KernelSVR,
    ModelFormatError,
    load_model,
)
from budgetsvm.modelfile import read_model
from conftest import array_edit, flip_bits_and_load, header_edit, rewrite
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

KERNELS = ["rbf", "linear", "poly", "sigmoid"]
ATTRIBUTES = (
    "support_",
    "support_vectors_",
    "dual_coef_",
    "intercept_",
    "n_support_",
    "n_iter_",
    "dual_objective_",
    "fit_status_",
    "shape_fit_",
    "gamma_",
    "n_features_in_",
)


def problem(n=240, seed=0, n_classes=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    labels = (X[:, 0] * X[:, 1] > 0).astype(int)
    if n_classes == 3:
        labels = np.where(X[:, 2] > 0.8, 2, labels)
    target = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, labels, target


def estimators(kernel, n_classes=2, labels="int"):
    X, y, target = problem(n_classes=n_classes)
    names = {"int": np.array([-3, 5, 9]), "str": np.array(["ham", "spam", "eggs"])}[labels]
    params = dict(kernel=kernel, gamma=0.3, coef0=0.5, degree=2)
    return [
        (KernelSVC(C=2.0, **params), X, names[y]),
        (KernelSVR(C=2.0, epsilon=0.05, **params), X, target),
        (KernelOneClassSVM(nu=0.2, **params), X, None),
    ]


def outputs(est, X):
    """Everything the estimator gives on X."""
    out = {"predict": est.predict(X)}
    if hasattr(est, "decision_function"):  # not SVR's
        out["decision"] = est.decision_function(X)
    if isinstance(est, KernelOneClassSVM):
        out["score_samples"] = est.score_samples(X)
        out["offset"] = est.offset_
    if hasattr(est, "probA_"):
        out["proba"] = est.predict_proba(X)
    if est.kernel == "linear":
        out["coef"] = est.coef_.toarray() if sp.issparse(est.coef_) else est.coef_
    return out


def assert_same_model(loaded, est, X):
    assert type(loaded) is type(est)
    assert loaded.get_params() == est.get_params()
    for name in ATTRIBUTES:
        a, b = getattr(loaded, name), getattr(est, name)
        if sp.issparse(b):
            assert sp.issparse(a)
            a, b = a.toarray(), b.toarray()
        assert_array_equal(a, b, err_msg=name)
        assert np.asarray(a).dtype == np.asarray(b).dtype, name
    if hasattr(est, "classes_"):
        assert_array_equal(loaded.classes_, est.classes_)
        assert loaded.classes_.dtype == est.classes_.dtype
    got, want = outputs(loaded, X), outputs(est, X)
    assert got.keys() == want.keys()
    for key in want:
        assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_round_trip_of_every_problem_and_kernel(tmp_path, kernel, storage):
    for est, X, y in estimators(kernel):
        Xs = sp.csr_matrix(X) if storage == "sparse" else X
        est.fit(Xs, y)
        path = tmp_path / f"{type(est).__name__}.model"
        est.save(path)
        loaded = type(est).load(path)
        assert_same_model(loaded, est, Xs)
        assert sp.issparse(loaded.support_vectors_) == (storage == "sparse")
        # Dense and sparse rows predict alike through the loaded model.
        assert_array_equal(loaded.predict(X), est.predict(Xs))
        # A loaded model pickles, and its pickle predicts the same.
        assert_array_equal(pickle.loads(pickle.dumps(loaded)).predict(X), est.predict(X))


@pytest.mark.parametrize("labels", ["int", "str"])
def test_multiclass_probability_and_class_weight(tmp_path, labels):
    est, X, y = estimators("rbf", n_classes=3, labels=labels)[0]
    weights = {y[0]: 2.0}
    est.set_params(probability=True, random_state=0, class_weight=weights)
    est.set_params(decision_function_shape="ovo").fit(X, y)
    est.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert_same_model(loaded, est, X)
    assert loaded.class_weight == weights
    assert_array_equal(loaded.class_weight_, est.class_weight_)
    loaded.set_params(decision_function_shape="ovr", break_ties=True)
    est.set_params(decision_function_shape="ovr", break_ties=True)
    assert_array_equal(loaded.predict(X), est.predict(X))
    assert_array_equal(loaded.decision_function(X), est.decision_function(X))


def test_precomputed_kernel_round_trip(tmp_path):
    X, y, target = problem(n=150)
    K = np.exp(-0.3 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    for est, t in (
        (KernelSVC(kernel="precomputed"), y),
        (KernelSVR(kernel="precomputed", C=3.0), target),
        (KernelOneClassSVM(kernel="precomputed", nu=0.3), None),
    ):
        est.fit(K, t)
        est.save(tmp_path / "m")
        loaded = load_model(tmp_path / "m")
        assert_same_model(loaded, est, K[:40])
        assert loaded.support_vectors_.shape == (0, 0)
        with zipfile.ZipFile(tmp_path / "m") as z:
            header = json.loads(z.read("header.json"))
        assert header["n_features"] == 150 and header["kernel"]["name"] == "precomputed"


def test_weighted_rows_and_feature_names(tmp_path):
    pd = pytest.importorskip("pandas")
    X, y, target = problem()
    frame = pd.DataFrame(X, columns=list("abcd"))
    weights = np.where(np.arange(len(y)) % 7 == 0, 0.0, 1.5)
    est = KernelSVR(C=2.0, gamma=0.3).fit(frame, target, sample_weight=weights)
    est.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert_array_equal(loaded.feature_names_in_, list("abcd"))
    assert_same_model(loaded, est, frame)


def test_header_is_version_5_with_the_kernel(tmp_path):
    X, _, target = problem()
    est = KernelSVR(kernel="poly", degree=2, gamma=0.25, coef0=1.5, C=2.0).fit(X, target)
    est.save(tmp_path / "m")
    with zipfile.ZipFile(tmp_path / "m") as z:
        assert sorted(z.namelist()) == [
            "dual_coef.npy", "header.json", "support.npy", "support_vectors.npy"
        ]
        header = json.loads(z.read("header.json"))
    assert header["version"] == 5 and header["estimator"] == "KernelSVR"
    assert header["task"] == "regression"
    assert header["kernel"] == {"name": "poly", "gamma": 0.25, "degree": 2, "coef0": 1.5}
    assert header["intercept"] == est.intercept_.tolist()
    assert header["exact"]["n_support"] == est.n_support_.tolist()
    assert header["exact"]["shape_fit"] == list(X.shape)
    saved = read_model(tmp_path / "m")
    assert saved.task == "regression" and saved.regression and saved.kernel == "poly"
    assert_array_equal(saved.predict(X), est.predict(X))
    assert_array_equal(saved.support, est.support_)


def test_load_checks_the_class(tmp_path):
    X, y, _ = problem()
    KernelSVC(gamma=0.3).fit(X, y).save(tmp_path / "m")
    with pytest.raises(TypeError, match="holds a KernelSVC, not a KernelSVR"):
        KernelSVR.load(tmp_path / "m")
    with pytest.raises(TypeError, match="not a BudgetSVC"):
        BudgetSVC.load(tmp_path / "m")


@settings(max_examples=15, deadline=None)
@given(
    kernel=st.sampled_from(KERNELS),
    which=st.integers(0, 2),
    n=st.integers(20, 80),
    seed=st.integers(0, 2**16),
    sparse=st.booleans(),
)
def test_round_trip_property(tmp_path_factory, kernel, which, n, seed, sparse):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * (rng.random((n, 3)) < 0.7)
    y = (X[:, 0] > 0).astype(int)
    if len(np.unique(y)) < 2:
        y[0] = 1 - y[0]
    est = [
        KernelSVC(kernel=kernel, gamma=0.5, degree=2),
        KernelSVR(kernel=kernel, gamma=0.5, degree=2),
        KernelOneClassSVM(kernel=kernel, gamma=0.5, degree=2, nu=0.3),
    ][which]
    target = [y, X[:, 0] - X[:, 1], None][which]
    Xs = sp.csr_matrix(X) if sparse else X
    est.fit(Xs, target)
    path = tmp_path_factory.mktemp("m") / "m"
    est.save(path)
    assert_same_model(load_model(path), est, Xs)


@pytest.fixture
def saved(tmp_path):
    X, y, _ = problem(n_classes=3)
    path = tmp_path / "good.model"
    KernelSVC(kernel="poly", degree=2, gamma=0.3, probability=True, random_state=0).fit(
        X, y
    ).save(path)
    return path


def test_inconsistent_exact_files_are_corrupted(saved, tmp_path):
    cases = {
        "kernel name": lambda h: h["kernel"].update(name="laplacian"),
        "degree": lambda h: h["kernel"].update(degree=1000),
        "negative degree": lambda h: h["kernel"].update(degree=-1),
        "coef0": lambda h: h["kernel"].update(coef0=None),
        "task": lambda h: h.update(task="regression"),
        "estimator": lambda h: h.update(estimator="KernelSVM"),
        "intercepts": lambda h: h.update(intercept=[0.0]),
        "no intercept": lambda h: h.pop("intercept"),
        "n_support sum": lambda h: h["exact"].update(n_support=[1, 1, 1]),
        "n_support length": lambda h: h["exact"].update(n_support=[1]),
        "n_iter": lambda h: h["exact"].update(n_iter=[1, 2]),
        "dual objective": lambda h: h["exact"].update(dual_objective=[0.0, None, 1.0]),
        "fit status": lambda h: h["exact"].update(fit_status=7),
        "shape_fit": lambda h: h["exact"].update(shape_fit=[0, 4]),
        "probabilities": lambda h: h.update(probability={"A": [1.0], "B": [0.0]}),
        "no exact": lambda h: h.pop("exact"),
        "coef rows": lambda h: h["arrays"].update(dual_coef=[3, h["arrays"]["dual_coef"][1]]),
    }
    for name, edit in cases.items():
        path = rewrite(saved, tmp_path / name, header_edit(edit))
        with pytest.raises(ModelFormatError, match="corrupted"):
            load_model(path)

    def support(value):
        def first_index(a):
            a[0] = value

        return array_edit("support.npy", first_index)

    for value in (-1, 240, 10**12):
        with pytest.raises(ModelFormatError, match="support indices out of range"):
            load_model(rewrite(saved, tmp_path / "support", support(value)))
    dropped = rewrite(saved, tmp_path / "dropped", lambda n, d: None if n == "support.npy" else d)
    with pytest.raises(ModelFormatError, match="corrupted"):
        load_model(dropped)


def test_bit_flips_give_the_documented_error_or_a_working_model(saved, tmp_path):
    X, _, _ = problem(n=5)
    flip_bits_and_load(saved, tmp_path, flips=200, seed=1, X=X)


def test_an_older_budgetsvm_refuses_version_5(saved, tmp_path):
    """A version-4 reader would take a KernelSVC file for a Gaussian BudgetSVC: the version
    number is what stops it (readers refuse versions above theirs)."""
    path = rewrite(saved, tmp_path / "v7", header_edit(lambda h: h.update(version=7)))
    with pytest.raises(ModelFormatError, match="newer budgetsvm"):
        load_model(path)


def test_the_kernel_is_the_headers_whatever_params_say(tmp_path):
    """The fuzzer's find: a file whose params lost the kernel loaded an rbf estimator over a
    precomputed model's arrays. The header's kernel is what the arrays were fitted with."""
    X, _, target = problem(n=100)
    K = X @ X.T
    est = KernelSVR(kernel="precomputed").fit(K, target)
    est.save(tmp_path / "m")
    path = rewrite(tmp_path / "m", tmp_path / "p", header_edit(lambda h: h.update(params={})))
    loaded = load_model(path)
    assert loaded.kernel == "precomputed"
    assert_array_equal(loaded.predict(K[:10]), est.predict(K[:10]))
