"""budgetsvm.kernels.rbf_kernel against scikit-learn, on dense and sparse input of every layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import budgetsvm
import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import _budgetsvm
from budgetsvm.kernels import rbf_kernel
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.metrics.pairwise import rbf_kernel as sk_rbf_kernel

ATOL = 1e-12

# Values of moderate size keep gamma * |x|^2 below a few hundred, so the rounding of the
# |x|^2 + |y|^2 - 2 x.y expansion (which both implementations use) stays far below ATOL.
gammas = st.one_of(
    st.floats(1e-3, 10.0, allow_nan=False, allow_infinity=False),
    st.sampled_from([1e-3, 0.1, 1.0, 2.0**-7]),
)
LAYOUTS = ("canonical", "unsorted", "duplicates", "coo", "csc")


@st.composite
def dense_matrix(draw, n_rows=None, n_cols=None, density=1.0):
    n = draw(st.integers(1, 9)) if n_rows is None else n_rows
    d = draw(st.integers(1, 12)) if n_cols is None else n_cols
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    if density < 1.0:
        X[rng.random((n, d)) >= density] = 0.0
    # Some exact duplicate rows: the kernel must be 1 there (to rounding).
    if n > 1 and draw(st.booleans()):
        X[-1] = X[0]
    return X


def to_layout(X: np.ndarray, layout: str, index_dtype, rng: np.random.Generator):
    """A sparse matrix equal to X (after summing duplicates) in the requested layout."""
    if layout == "coo":
        M = sp.coo_matrix(X)
    elif layout == "csc":
        M = sp.csc_matrix(X)
    else:
        csr = sp.csr_matrix(X)
        data, indices, indptr = csr.data.copy(), csr.indices.copy(), csr.indptr.copy()
        if layout == "unsorted":
            for i in range(X.shape[0]):
                lo, hi = indptr[i], indptr[i + 1]
                perm = rng.permutation(hi - lo) + lo
                data[lo:hi], indices[lo:hi] = data[perm], indices[perm]
        elif layout == "duplicates":
            # Split every stored value in two entries of the same column, rows shuffled inside.
            new_data, new_indices, new_indptr = [], [], [0]
            for i in range(X.shape[0]):
                lo, hi = indptr[i], indptr[i + 1]
                parts_v = np.concatenate([data[lo:hi] * 0.25, data[lo:hi] * 0.75])
                parts_i = np.concatenate([indices[lo:hi], indices[lo:hi]])
                perm = rng.permutation(len(parts_v))
                new_data.append(parts_v[perm])
                new_indices.append(parts_i[perm])
                new_indptr.append(new_indptr[-1] + len(parts_v))
            data = np.concatenate(new_data) if new_data else data
            indices = np.concatenate(new_indices) if new_indices else indices
            indptr = np.asarray(new_indptr)
        M = sp.csr_matrix((data, indices, indptr), shape=X.shape)
    if index_dtype is not None:
        if M.format == "coo":
            M.row = M.row.astype(index_dtype)
            M.col = M.col.astype(index_dtype)
        else:
            M.indices = M.indices.astype(index_dtype)
            M.indptr = M.indptr.astype(index_dtype)
    return M


def reference(X, Y, gamma):
    """scikit-learn on the dense equivalents (so duplicates are summed the way scipy does)."""
    Xd = X.toarray() if sp.issparse(X) else X
    Yd = None if Y is None else (Y.toarray() if sp.issparse(Y) else Y)
    return sk_rbf_kernel(Xd, Yd, gamma=gamma)


@given(data=st.data(), gamma=gammas)
def test_dense_matches_sklearn(data, gamma):
    X = data.draw(dense_matrix())
    Y = data.draw(dense_matrix(n_cols=X.shape[1]))
    K = rbf_kernel(X, Y, gamma=gamma)
    assert K.shape == (X.shape[0], Y.shape[0])
    assert K.dtype == np.float64
    assert_allclose(K, sk_rbf_kernel(X, Y, gamma=gamma), rtol=0, atol=ATOL)


@given(
    data=st.data(),
    gamma=gammas,
    density=st.sampled_from([0.0, 0.05, 0.3, 0.7, 1.0]),
    layout_x=st.sampled_from(LAYOUTS),
    layout_y=st.sampled_from(LAYOUTS),
    index_dtype=st.sampled_from([None, np.int32, np.int64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_sparse_matches_sklearn(data, gamma, density, layout_x, layout_y, index_dtype, seed):
    rng = np.random.default_rng(seed)
    X = data.draw(dense_matrix(density=density))
    Y = data.draw(dense_matrix(n_cols=X.shape[1], density=density))
    Xs = to_layout(X, layout_x, index_dtype, rng)
    Ys = to_layout(Y, layout_y, index_dtype, rng)
    expected = reference(Xs, Ys, gamma)
    assert_allclose(rbf_kernel(Xs, Ys, gamma=gamma), expected, rtol=0, atol=ATOL)
    # Mixed dense/sparse operands.
    assert_allclose(rbf_kernel(Xs, Y, gamma=gamma), expected, rtol=0, atol=ATOL)
    assert_allclose(rbf_kernel(X, Ys, gamma=gamma), expected, rtol=0, atol=ATOL)


@given(data=st.data(), gamma=gammas, sparse=st.booleans())
def test_y_none_means_x(data, gamma, sparse):
    X = data.draw(dense_matrix(density=0.5))
    Xin = sp.csr_matrix(X) if sparse else X
    K = rbf_kernel(Xin, gamma=gamma)
    assert_allclose(K, sk_rbf_kernel(X, gamma=gamma), rtol=0, atol=ATOL)
    assert_allclose(np.diag(K), 1.0, rtol=0, atol=ATOL)
    assert_allclose(K, K.T, rtol=0, atol=ATOL)


@given(data=st.data(), sparse=st.booleans())
def test_gamma_none_is_one_over_n_features(data, sparse):
    X = data.draw(dense_matrix(density=0.5))
    Y = data.draw(dense_matrix(n_cols=X.shape[1], density=0.5))
    Xin, Yin = (sp.csr_matrix(X), sp.csr_matrix(Y)) if sparse else (X, Y)
    expected = sk_rbf_kernel(X, Y, gamma=None)
    assert_allclose(rbf_kernel(Xin, Yin), expected, rtol=0, atol=ATOL)
    assert_allclose(rbf_kernel(Xin, Yin, gamma=1.0 / X.shape[1]), expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("shape_x, shape_y", [((1, 1), (1, 1)), ((1, 5), (7, 5)), ((6, 1), (1, 1))])
def test_degenerate_shapes(shape_x, shape_y):
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=shape_x), rng.normal(size=shape_y)
    for a, b in [(X, Y), (sp.csr_matrix(X), sp.csr_matrix(Y))]:
        assert_allclose(rbf_kernel(a, b, gamma=0.3), sk_rbf_kernel(X, Y, gamma=0.3), atol=ATOL)


def test_all_zero_sparse_rows():
    X = sp.csr_matrix((3, 4))
    Y = sp.csr_matrix(np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    assert_allclose(rbf_kernel(X, Y, gamma=0.5), reference(X, Y, 0.5), rtol=0, atol=ATOL)


def test_int_and_float32_input_converted():
    X = np.arange(12).reshape(4, 3)
    expected = sk_rbf_kernel(X.astype(np.float64), gamma=0.01)
    assert_allclose(rbf_kernel(X, gamma=0.01), expected, rtol=0, atol=ATOL)
    Xf = X.astype(np.float32)
    assert_allclose(rbf_kernel(Xf, gamma=0.01), expected, rtol=0, atol=ATOL)


def test_non_contiguous_input():
    rng = np.random.default_rng(2)
    big = rng.normal(size=(10, 8))
    X = big[::2, ::3]  # a strided view
    F = np.asfortranarray(rng.normal(size=(4, 3)))
    expected = sk_rbf_kernel(np.ascontiguousarray(X), np.ascontiguousarray(F), gamma=0.4)
    assert_allclose(rbf_kernel(X, F, gamma=0.4), expected, rtol=0, atol=ATOL)


def test_overflowing_norms_give_zero_not_one():
    # |x|^2 overflows to inf for these rows, and inf - inf = NaN must not be read as distance 0:
    # the true squared distance is 9e400, so the kernel value is exp(-9e100) = 0 (to double
    # precision), for any gamma >= 1e-300. The diagonal stays 1.
    X = np.array([[3e200, 1e200, 0.0, 0.0], [0.0, 1e200, 0.0, 0.0]])
    for Xin in (X, sp.csr_matrix(X)):
        K = rbf_kernel(Xin, gamma=1e-300)
        assert K[0, 1] == 0.0 and K[1, 0] == 0.0, K
        assert_allclose(np.diag(K), 1.0)
    X2 = np.array([[1e200, 1e200], [-1e200, 1e200]])
    for Xin in (X2, sp.csr_matrix(X2)):
        K = rbf_kernel(Xin, gamma=1e-300)
        assert K[0, 1] == 0.0, K


# --- errors -------------------------------------------------------------------------------------


def test_feature_count_mismatch():
    with pytest.raises(ValueError, match="features"):
        rbf_kernel(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="features"):
        rbf_kernel(sp.csr_matrix(np.ones((2, 3))), sp.csr_matrix(np.ones((2, 4))))


@pytest.mark.parametrize("where", ["X", "Y"])
@pytest.mark.parametrize("sparse", [False, True])
def test_nan_rejected(where, sparse):
    X, Y = np.ones((3, 2)), np.ones((2, 2))
    (X if where == "X" else Y)[1, 1] = np.nan
    if sparse:
        X, Y = sp.csr_matrix(X), sp.csr_matrix(Y)
    with pytest.raises(ValueError, match="NaN"):
        rbf_kernel(X, Y, gamma=1.0)


def test_inf_rejected():
    X = np.ones((3, 2))
    X[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        rbf_kernel(X, gamma=1.0)


@pytest.mark.parametrize("gamma", [0.0, -1.0, -1e-300, np.nan, np.inf])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        rbf_kernel(np.ones((2, 2)), gamma=gamma)


def _csr_parts(data, indices, indptr, n_cols=3, dtype=np.int32):
    return (
        np.asarray(data, dtype=np.float64),
        np.asarray(indices, dtype=dtype),
        np.asarray(indptr, dtype=dtype),
        n_cols,
    )


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize(
    "parts, match",
    [
        (([1.0, 2.0], [0, 2], [0, 2, 1]), "indptr"),
        (([1.0, 2.0], [0, 2], [1, 1, 2]), "indptr"),
        (([1.0, 2.0], [0, 2], [0, 1, 5]), "indptr"),
        (([], [], []), "indptr"),
        (([1.0, 2.0], [0, 3], [0, 1, 2]), "column index"),
        (([1.0, 2.0], [0, -1], [0, 1, 2]), "column index"),
        (([1.0, 2.0, 3.0], [0, 2], [0, 1, 2]), "differ in length"),
    ],
    ids=[
        "decreasing",
        "start-not-0",
        "end-past-data",
        "empty",
        "col-too-big",
        "col-negative",
        "length-mismatch",
    ],
)
def test_native_rejects_malformed_csr_parts(parts, match, dtype):
    # The Python layer only hands over well-formed CSR, but the native functions re-check it.
    good = _csr_parts([1.0, 2.0], [0, 2], [0, 1, 2], dtype=dtype)
    bad = _csr_parts(*parts, dtype=dtype)
    with pytest.raises(ValueError, match=match):
        _budgetsvm.rbf_kernel(bad, good, 1.0)
    with pytest.raises(ValueError, match=match):
        _budgetsvm.decision_function(np.ones((2, 3)), np.ones((2, 1)), 1.0, bad)


def test_native_rejects_bad_dense_layout():
    with pytest.raises(ValueError, match="contiguous"):
        _budgetsvm.rbf_kernel(np.ones((3, 4))[:, ::2], np.ones((1, 2)), 1.0)
    with pytest.raises(TypeError):
        _budgetsvm.rbf_kernel(np.ones((2, 2), dtype=np.int64), np.ones((2, 2)), 1.0)
    with pytest.raises(ValueError, match="gamma"):
        _budgetsvm.rbf_kernel(np.ones((2, 2)), np.ones((2, 2)), -1.0)


# --- side effects and threads --------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_inputs_not_modified(layout):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 5))
    X[X < 0] = 0.0
    Y = rng.normal(size=(4, 5))
    Xs = to_layout(X, layout, None, rng)
    Ys = to_layout(Y, layout, np.int64, rng)
    parts = ("data", "row", "col") if layout == "coo" else ("data", "indices", "indptr")
    before = [{p: getattr(M, p).copy() for p in parts} for M in (Xs, Ys)]
    canonical = [M.has_canonical_format for M in (Xs, Ys)]
    Xd, Yd = X.copy(), Y.copy()
    rbf_kernel(Xs, Ys, gamma=0.5)
    rbf_kernel(Xs, gamma=0.5)
    rbf_kernel(X, Y, gamma=0.5)
    for M, saved, canon in zip((Xs, Ys), before, canonical):
        for p in parts:
            got = getattr(M, p)
            assert got.dtype == saved[p].dtype
            assert_array_equal(got, saved[p])
        assert M.has_canonical_format == canon
    assert_array_equal(X, Xd)
    assert_array_equal(Y, Yd)


@pytest.fixture
def restore_threads():
    n = budgetsvm.get_num_threads()
    yield
    budgetsvm.set_num_threads(n)


def test_thread_count_does_not_change_results(restore_threads):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 40))
    Y = rng.normal(size=(250, 40))
    Xs = sp.csr_matrix(np.where(X > 0.5, X, 0.0))
    results = {}
    for n in (1, 2):
        budgetsvm.set_num_threads(n)
        assert budgetsvm.get_num_threads() == n
        results[n] = (rbf_kernel(X, Y, gamma=0.05), rbf_kernel(Xs, Y, gamma=0.05))
    assert_array_equal(results[1][0], results[2][0])
    assert_array_equal(results[1][1], results[2][1])


def test_set_num_threads_zero_means_all_cores(restore_threads):
    budgetsvm.set_num_threads(0)
    assert budgetsvm.get_num_threads() >= 1


def test_simd_level_is_reported():
    assert budgetsvm.simd_level() in ("avx512f+fma", "avx2+fma", "portable")


LEVEL_CHILD = """
import json, numpy as np, budgetsvm
rng = np.random.default_rng(0)
X = rng.uniform(size=(600, 3)); y = (np.floor(3 * X[:, 0]) + np.floor(3 * X[:, 1])) % 2
clf = budgetsvm.BudgetSVC(C=1.0, gamma=20.0, budget=40, epochs=2, random_state=0).fit(X, y)
print(json.dumps([budgetsvm.simd_level(), clf.decision_function(X[:50]).tolist()]))
"""


def test_every_simd_level_trains_the_same_model():
    # BUDGETSVM_SIMD caps the kernel loops' instruction set; a level the CPU lacks falls back
    # to the best below it. Every level computes the same kernel values up to rounding.
    runs = {}
    for cap in ("portable", "avx2", "avx512"):
        env = dict(os.environ, BUDGETSVM_SIMD=cap)
        out = subprocess.run(
            [sys.executable, "-c", LEVEL_CHILD], env=env, capture_output=True, text=True, check=True
        )
        runs[cap] = json.loads(out.stdout)
    assert runs["portable"][0] == "portable"
    assert runs["avx2"][0] in ("avx2+fma", "portable")
    assert runs["avx512"][0] in ("avx512f+fma", "avx2+fma", "portable")
    reference = np.array(runs["portable"][1])
    for cap in ("avx2", "avx512"):
        np.testing.assert_allclose(runs[cap][1], reference, rtol=1e-6, atol=1e-8)
