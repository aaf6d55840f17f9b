"""Sparse data stays sparse: both support vector storages train the same model, nothing of size
n_features is allocated (10^12 columns), and sparse models survive predict, pickle, model files,
partial_fit, fit_file, the CLI and budgetsvm.dask."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import BudgetSVC, KernelSVC
from budgetsvm.datasets import load_svmlight_file
from budgetsvm.modelfile import load_model, save_model
from conftest import array_edit, rewrite
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

TRILLION = 10**12


def text_like(n: int, n_terms: int, seed: int, n_classes: int = 2):
    """Rows of a few 'terms' each; the label depends on which terms occur."""
    rng = np.random.default_rng(seed)
    rows, cols, vals = [], [], []
    y = np.empty(n, dtype=np.int64)
    for i in range(n):
        k = rng.integers(2, 9)
        terms = np.unique(rng.integers(0, n_terms, size=k))
        v = rng.uniform(0.2, 1.2, size=len(terms))
        rows += [i] * len(terms)
        cols += terms.tolist()
        vals += v.tolist()
        y[i] = int(1.5 * v[terms % 3 == 0].sum()) % n_classes
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, n_terms))
    y[:n_classes] = np.arange(n_classes)
    return X, y


def spread(X: sp.csr_matrix, n_cols: int) -> sp.csr_matrix:
    """The same matrix with column j moved to column j * (n_cols // X.shape[1])."""
    step = n_cols // X.shape[1]
    X = X.tocsr()
    return sp.csr_matrix(
        (X.data, X.indices.astype(np.int64) * step, X.indptr.astype(np.int64)),
        shape=(X.shape[0], n_cols),
    )


def write_libsvm(path, X: sp.csr_matrix, y) -> None:
    with open(path, "w") as f:
        for i in range(X.shape[0]):
            row = X[i]
            pairs = " ".join(f"{c + 1}:{float(v)!r}" for c, v in zip(row.indices, row.data))
            f.write(f"{y[i]} {pairs}\n")


def dense_sv(clf) -> np.ndarray:
    sv = clf.support_vectors_
    return sv.toarray() if sp.issparse(sv) else np.asarray(sv)


@given(
    seed=st.integers(0, 10_000),
    n_classes=st.sampled_from([2, 3]),
    solver=st.sampled_from(["bsgd", "bsca"]),
    maintenance=st.sampled_from(["merge", "remove", "project"]),
    merge=st.sampled_from(["lookup-wd", "lookup-h", "gss", "gss-precise"]),
)
def test_dense_and_sparse_storage_train_the_same_model(seed, n_classes, solver, maintenance, merge):
    X, y = text_like(150, 50, seed, n_classes)
    params = dict(
        C=5.0,
        gamma=0.8,
        budget=10,
        epochs=2,
        solver=solver,
        maintenance=maintenance,
        merge=merge,
        random_state=seed,
    )
    dense = BudgetSVC(sv_storage="dense", **params).fit(X, y)
    sparse = BudgetSVC(sv_storage="sparse", **params).fit(X, y)
    assert not sp.issparse(dense.support_vectors_)
    assert sp.issparse(sparse.support_vectors_)
    assert_allclose(sparse.dual_coef_, dense.dual_coef_, rtol=1e-9, atol=1e-12)
    assert_allclose(dense_sv(sparse), dense.support_vectors_, rtol=1e-9, atol=1e-12)
    assert_allclose(sparse.decision_function(X), dense.decision_function(X), rtol=1e-9, atol=1e-12)


def test_auto_storage_follows_the_input():
    X, y = text_like(200, 20_000, 1)
    assert sp.issparse(BudgetSVC(budget=10, epochs=1, gamma=1.0).fit(X, y).support_vectors_)
    mid, _ = text_like(200, 5000, 1)
    assert not sp.issparse(BudgetSVC(budget=10, epochs=1, gamma=1.0).fit(mid, y).support_vectors_)
    narrow, _ = text_like(200, 100, 1)
    assert not sp.issparse(
        BudgetSVC(budget=10, epochs=1, gamma=1.0).fit(narrow, y).support_vectors_
    )
    assert not sp.issparse(
        BudgetSVC(budget=10, epochs=1, gamma=1.0).fit(X.toarray(), y).support_vectors_
    )
    with pytest.raises(ValueError, match="sv_storage"):
        BudgetSVC(sv_storage="csr").fit(X, y)


@pytest.mark.parametrize("solver", ["bsgd", "bsca"])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_budget_svc_with_a_trillion_columns(solver, n_classes):
    X, y = text_like(300, 40, 3, n_classes)
    wide = spread(X, TRILLION)
    params = dict(C=5.0, gamma=0.8, budget=15, epochs=2, solver=solver, random_state=0)
    clf = BudgetSVC(**params).fit(wide, y)
    ref = BudgetSVC(**params).fit(X, y)
    sv = clf.support_vectors_
    assert sp.issparse(sv) and sv.shape[1] == TRILLION
    assert clf.n_features_in_ == TRILLION
    assert_allclose(clf.dual_coef_, ref.dual_coef_, rtol=1e-9, atol=1e-12)
    assert_allclose(clf.decision_function(wide), ref.decision_function(X), rtol=1e-9, atol=1e-12)
    assert_array_equal(clf.predict(wide), ref.predict(X))
    # Dense storage of 10^12 columns cannot exist: a clear error, not an abort.
    with pytest.raises(ValueError, match="sv_storage"):
        BudgetSVC(sv_storage="dense", **params).fit(wide, y)


def test_kernel_svc_with_a_trillion_columns():
    X, y = text_like(200, 40, 4)
    wide = spread(X, TRILLION)
    clf = KernelSVC(C=2.0, gamma=0.8).fit(wide, y)
    ref = KernelSVC(C=2.0, gamma=0.8).fit(X, y)
    assert sp.issparse(clf.support_vectors_) and clf.support_vectors_.shape[1] == TRILLION
    assert_array_equal(clf.support_, ref.support_)
    # Sparse after a sparse fit, as SVC's.
    assert sp.issparse(clf.dual_coef_)
    assert_allclose(clf.dual_coef_.toarray(), ref.dual_coef_.toarray(), rtol=1e-6, atol=1e-9)
    assert_allclose(clf.decision_function(wide), ref.decision_function(X), rtol=1e-6, atol=1e-8)


def test_kernel_svc_sparse_support_vectors_match_svc():
    from sklearn.svm import SVC

    X, y = text_like(300, 3000, 5)
    ours = KernelSVC(C=1.0, gamma=0.5, tol=1e-6).fit(X, y)
    svc = SVC(C=1.0, gamma=0.5, tol=1e-6).fit(X, y)
    assert sp.issparse(ours.support_vectors_)
    assert_array_equal(np.sort(ours.support_), np.sort(svc.support_))
    assert_allclose(ours.decision_function(X), svc.decision_function(X), atol=1e-3)


def test_sparse_model_round_trips_through_file_and_pickle(tmp_path):
    X, y = text_like(300, 20_000, 6, 3)
    clf = BudgetSVC(budget=20, epochs=2, gamma=0.8, random_state=0).fit(X, y)
    assert sp.issparse(clf.support_vectors_)
    save_model(clf, tmp_path / "m.bsvm")
    loaded = load_model(tmp_path / "m.bsvm")
    assert sp.issparse(loaded.support_vectors_)
    assert (loaded.support_vectors_ != clf.support_vectors_).nnz == 0
    assert_array_equal(loaded.dual_coef_, clf.dual_coef_)
    assert_array_equal(loaded.decision_function(X), clf.decision_function(X))
    again = pickle.loads(pickle.dumps(clf))
    assert_array_equal(again.decision_function(X), clf.decision_function(X))


def test_dense_models_are_still_written_as_version_1(tmp_path):
    import json
    import zipfile

    X, y = text_like(100, 50, 7)
    # Unpolished (no intercept): the format every budgetsvm reads.
    clf = BudgetSVC(budget=10, epochs=1, gamma=0.8, random_state=0, polish=False)
    clf.fit(X.toarray(), y)
    save_model(clf, tmp_path / "d.bsvm")
    with zipfile.ZipFile(tmp_path / "d.bsvm") as z:
        assert json.loads(z.read("header.json"))["version"] == 1
    assert_array_equal(
        load_model(tmp_path / "d.bsvm").predict(X.toarray()), clf.predict(X.toarray())
    )


@pytest.mark.parametrize(
    "corrupt",
    ["unsorted", "out_of_range", "indptr"],
)
def test_corrupted_sparse_model_files_are_rejected(tmp_path, corrupt):
    from budgetsvm import ModelFormatError

    X, y = text_like(100, 20_000, 8)
    clf = BudgetSVC(budget=10, epochs=1, gamma=0.8, random_state=0).fit(X, y)
    save_model(clf, tmp_path / "m.bsvm")
    arr_name = {
        "unsorted": "support_vectors_indices.npy",
        "out_of_range": "support_vectors_indices.npy",
        "indptr": "support_vectors_indptr.npy",
    }[corrupt]

    def damage(a):
        if corrupt == "unsorted":
            a[:2] = a[1::-1] if a[0] != a[1] else a[:2]
            a[0], a[1] = max(a[0], a[1]) + 1, min(a[0], a[1])
        elif corrupt == "out_of_range":
            a[-1] = 10**9
        else:
            a[1] = a[-1] + 5

    out = rewrite(tmp_path / "m.bsvm", tmp_path / "bad.bsvm", array_edit(arr_name, damage))
    with pytest.raises(ModelFormatError):
        load_model(out)


def test_partial_fit_stays_sparse_and_equals_fit():
    X, y = text_like(400, 20_000, 9)
    params = dict(C=5.0, gamma=0.8, budget=15, epochs=1, shuffle=False, random_state=0)
    full = BudgetSVC(**params, polish=False).fit(X, y)
    stream = BudgetSVC(**params)
    for start in range(0, 400, 100):
        stream.partial_fit(
            X[start : start + 100], y[start : start + 100], classes=[0, 1], n_samples=400
        )
    assert sp.issparse(stream.support_vectors_)
    assert_allclose(stream.dual_coef_, full.dual_coef_, rtol=1e-12)
    # The run survives pickling in sparse form and goes on.
    again = pickle.loads(pickle.dumps(stream))
    again.partial_fit(X[:50], y[:50])
    stream.partial_fit(X[:50], y[:50])
    assert_array_equal(again.dual_coef_, stream.dual_coef_)


def test_fit_file_and_reader_with_a_trillion_column_index(tmp_path):
    X, y = text_like(200, 40, 10)
    wide = spread(X, TRILLION)
    path = tmp_path / "wide.svm"
    write_libsvm(path, wide, y)
    with open(path, "a") as f:
        f.write(f"0 {TRILLION}:1.0\n")  # the largest index, 10^12 (1-based)
    Xr, yr = load_svmlight_file(path)
    assert Xr.shape == (201, TRILLION)
    assert Xr.indices.max() == TRILLION - 1
    assert (Xr[:200] != wide).nnz == 0
    params = dict(C=5.0, gamma=0.8, budget=15, epochs=2, shuffle=False, random_state=0)
    from_file = BudgetSVC(**params).fit_file(path, chunk_rows=64)
    in_memory = BudgetSVC(**params).fit(Xr, yr)
    assert sp.issparse(from_file.support_vectors_)
    assert_allclose(from_file.dual_coef_, in_memory.dual_coef_, rtol=1e-12)


def test_dask_predict_on_a_sparse_model():
    dask = pytest.importorskip("dask")
    import budgetsvm.dask as bdask

    X, y = text_like(300, 20_000, 11)
    clf = BudgetSVC(budget=15, epochs=1, gamma=0.8, random_state=0).fit(X, y)
    import dask.array as da

    Xd = da.from_array(X.toarray(), chunks=(100, -1))
    assert dask is not None
    assert_array_equal(bdask.predict(clf, Xd).compute(), clf.predict(X))


def test_cli_trains_predicts_and_streams_a_trillion_column_file(tmp_path):
    import subprocess
    import sys

    X, y = text_like(300, 40, 12)
    wide = spread(X, TRILLION)
    train = tmp_path / "wide.svm"
    write_libsvm(train, wide, y)

    def cli(*args):
        r = subprocess.run(
            [sys.executable, "-m", "budgetsvm", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr
        return r

    common = ["-q", "-g", 0.8, "-B", 15, "-e", 2, "--no-shuffle"]
    cli("train", *common, train, tmp_path / "mem.model")
    cli("train", *common, "--stream", "--chunk-rows", 64, train, tmp_path / "stream.model")
    a, b = load_model(tmp_path / "mem.model"), load_model(tmp_path / "stream.model")
    assert sp.issparse(a.support_vectors_) and sp.issparse(b.support_vectors_)
    assert_array_equal(a.dual_coef_, b.dual_coef_)
    out = tmp_path / "pred.txt"
    cli("predict", train, tmp_path / "mem.model", out)
    predicted = np.array(out.read_text().split(), dtype=float)
    assert_array_equal(predicted, a.predict(load_svmlight_file(train)[0]))
