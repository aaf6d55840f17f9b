"""The LIBSVM/svmlight reader against scikit-learn's, and its error reporting.

budgetsvm.datasets is imported inside each test (through the ``load`` fixture) so that a build
without the reader fails these tests one by one instead of stopping the whole collection.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal
from sklearn.datasets import dump_svmlight_file
from sklearn.datasets import load_svmlight_file as sk_load

SHARED_DATA = Path(__file__).parents[2] / "shared" / "data"

COMPRESSORS = {
    "plain": lambda b: b,
    "gzip": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
}
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


@pytest.fixture
def load():
    from budgetsvm.datasets import load_svmlight_file

    return load_svmlight_file


def sk_reference(raw: bytes, n_features=None):
    """scikit-learn's reader on the uncompressed bytes, 1-based indices."""
    return sk_load(io.BytesIO(raw), zero_based=False, n_features=n_features)


def assert_same(ours, theirs, structure: bool = True):
    (X, y), (X_ref, y_ref) = ours, theirs
    assert sp.issparse(X) and X.format == "csr"
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert X.shape == X_ref.shape
    assert_array_equal(y, y_ref)
    assert_array_equal(X.toarray(), X_ref.toarray())
    if structure:  # explicit zeros are kept by both readers
        assert_array_equal(X.indptr, X_ref.indptr)
        assert_array_equal(X.indices, X_ref.indices)
        assert_array_equal(X.data, X_ref.data)


# --- round trip through scikit-learn's writer ---------------------------------------------------

values = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    # Any double, subnormals included, short of the top (sklearn's writer sums the values in its
    # finiteness check, and "%.16g" rounds the largest doubles up to inf).
    st.floats(-1e300, 1e300, allow_nan=False),
    st.integers(-1000, 1000).map(float),
)
labels = st.one_of(
    st.integers(-5, 5).map(float),
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
)


@st.composite
def svmlight_data(draw):
    n = draw(st.integers(1, 25))
    d = draw(st.integers(1, 40))
    density = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mask = rng.random((n, d)) < density
    X = np.zeros((n, d))
    k = int(mask.sum())
    X[mask] = draw(st.lists(values, min_size=k, max_size=k)) if k else []
    X_sparse = sp.csr_matrix(X)
    if draw(st.booleans()) and X[0, d - 1] == 0.0:  # an explicit zero, kept by both readers
        coo = X_sparse.tocoo()
        X_sparse = sp.csr_matrix(
            (np.append(coo.data, 0.0), (np.append(coo.row, 0), np.append(coo.col, d - 1))),
            shape=(n, d),
        )
        X_sparse.sort_indices()
    y = np.array(draw(st.lists(labels, min_size=n, max_size=n)))
    qid = rng.integers(1, 4, n) if draw(st.booleans()) else None
    comment = draw(st.sampled_from([None, "a comment", "two\nlines"]))
    return X_sparse, y, qid, comment


@given(data=svmlight_data(), compression=st.sampled_from(sorted(COMPRESSORS)))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_round_trip_matches_sklearn(tmp_path, load, data, compression):
    X, y, qid, comment = data
    buf = io.BytesIO()
    dump_svmlight_file(X, y, buf, zero_based=False, query_id=qid, comment=comment)
    raw = buf.getvalue()
    # A misleading extension: compression is detected from the content.
    path = tmp_path / f"data-{compression}.txt"
    path.write_bytes(COMPRESSORS[compression](raw))
    d = X.shape[1]
    ours = load(path, n_features=d)
    assert_same(ours, sk_reference(raw, n_features=d))
    # Without n_features the width is the largest index present (a str path works too).
    X_auto, y_auto = load(str(path))
    assert X_auto.shape == (X.shape[0], X.indices.max() + 1 if X.nnz else 0)
    assert_array_equal(y_auto, ours[1])
    assert_array_equal(X_auto.toarray(), ours[0].toarray()[:, : X_auto.shape[1]])


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_compressed_with_its_usual_extension(tmp_path, load, compression):
    raw = b"+1 1:0.5 3:-2\n-1 2:1e-3\n"
    suffix = {"plain": ".svm", "gzip": ".gz", "bz2": ".bz2", "xz": ".xz"}[compression]
    path = tmp_path / f"data{suffix}"
    path.write_bytes(COMPRESSORS[compression](raw))
    assert_same(load(path), sk_reference(raw))


# --- format details -----------------------------------------------------------------------------


def test_comments_blank_lines_crlf_qid_and_plus_labels(tmp_path, load):
    text = (
        "# header comment\r\n"
        "\r\n"
        "+1 qid:3 1:1 4:2.5 # trailing comment\r\n"
        "   \r\n"
        "-1 qid:3 2:-1e2\r\n"
        "+1\r\n"
        "2.5\t1:0.25   3:7\r\n"
        "# the end"
    )
    path = tmp_path / "odd.svm"
    path.write_bytes(text.encode())
    X, y = load(path)
    assert_array_equal(y, [1.0, -1.0, 1.0, 2.5])
    expected = np.array(
        [[1.0, 0.0, 0.0, 2.5], [0.0, -100.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.25, 0.0, 7.0, 0.0]]
    )
    assert_array_equal(X.toarray(), expected)
    assert_same((X, y), sk_reference(text.replace("\r\n", "\n").encode()))


def test_whitespace_and_qid_as_scikit_learn_reads_them(tmp_path, load):
    # Vertical tab and form feed separate tokens (Python's bytes.split, which scikit-learn's
    # reader uses), and a qid's value is not read, numeric or not.
    text = "1\x0b1:1\x0c3:2 \x0b\n-1 qid:x 2:5\n2 qid: 1:1\n"
    path = tmp_path / "ws.svm"
    path.write_bytes(text.encode())
    assert_same(load(path), sk_reference(text.encode()))


def test_n_features_widens(tmp_path, load):
    path = tmp_path / "narrow.svm"
    path.write_bytes(b"1 2:1\n-1 1:3\n")
    X, _ = load(path)
    assert X.shape == (2, 2)
    X, _ = load(path, n_features=10)
    assert X.shape == (2, 10)
    assert_array_equal(X.toarray()[:, :2], [[0.0, 1.0], [3.0, 0.0]])


def test_n_features_too_small(tmp_path, load):
    path = tmp_path / "wide.svm"
    path.write_bytes(b"1 5:1\n")
    with pytest.raises(ValueError, match="n_features"):
        load(path, n_features=3)


@pytest.mark.parametrize("text", [b"", b"# only a comment\n\n", b"\n\n\n"])
def test_files_without_rows(tmp_path, load, text):
    path = tmp_path / "empty.svm"
    path.write_bytes(text)
    X, y = load(path, n_features=4)
    assert X.shape == (0, 4)
    assert y.shape == (0,)


def test_large_file_is_read_in_full(tmp_path, load):
    # Big enough to be parsed in several chunks in parallel.
    rng = np.random.default_rng(60)
    X = sp.random(20000, 50, density=0.1, format="csr", random_state=rng)
    y = rng.integers(-1, 2, 20000).astype(float)
    buf = io.BytesIO()
    dump_svmlight_file(X, y, buf, zero_based=False)
    raw = buf.getvalue()
    path = tmp_path / "big.svm"
    path.write_bytes(raw)
    assert_same(load(path, n_features=50), sk_reference(raw, n_features=50))


# --- errors -------------------------------------------------------------------------------------

GOOD = "1 1:0.5 3:1\n# a comment\n\n-1 2:2\n"  # 4 lines; a bad line after it is line 5
MALFORMED = {
    "missing-colon": ("1 1:1 2\n", r"':'|colon"),
    "index-zero": ("1 0:1\n", r"index"),
    "negative-index": ("1 -2:1\n", r"index"),
    "decreasing-indices": ("1 1:1 7:1 5:1\n", r"increasing|order"),
    "duplicate-index": ("1 2:1 2:3\n", r"increasing|order|duplicate"),
    "non-numeric-value": ("1 3:abc\n", r"value"),
    "empty-value": ("1 3:\n", r"value"),
    "nan-value": ("1 3:nan\n", r"finite|nan|NaN"),
    "inf-value": ("1 3:-inf\n", r"finite|inf"),
    "bad-label": ("abc 1:1\n", r"label"),
    "multi-label": ("1,2 1:1\n", r"label"),
    "nan-label": ("nan 1:1\n", r"label"),
}


def assert_parse_error(excinfo, path: Path, line: int, keyword: str):
    message = str(excinfo.value)
    assert str(path) in message, message
    assert re.search(rf"\bline {line}\b", message), message
    assert re.search(keyword, message), message


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("position", ["first", "after-good-lines"])
def test_malformed_line(tmp_path, load, case, position):
    bad, keyword = MALFORMED[case]
    text, line = (bad, 1) if position == "first" else (GOOD + bad + "1 1:1\n", 5)
    path = tmp_path / f"{case}.svm"
    path.write_bytes(text.encode())
    with pytest.raises(ValueError) as excinfo:
        load(path)
    assert_parse_error(excinfo, path, line, keyword)


@pytest.mark.parametrize("compression", ["gzip", "bz2", "xz"])
def test_malformed_line_in_compressed_file(tmp_path, load, compression):
    path = tmp_path / f"bad.{compression}"
    path.write_bytes(COMPRESSORS[compression]((GOOD + "1 2:1 2:3\n").encode()))
    with pytest.raises(ValueError) as excinfo:
        load(path)
    assert_parse_error(excinfo, path, 5, r"increasing|order|duplicate")


def test_malformed_line_deep_in_a_large_file(tmp_path, load):
    # The reader parses chunks in parallel; the line number must still count the whole file.
    good = "".join(f"{(-1) ** i} 1:{i} 2:0.5\n" for i in range(30000))
    path = tmp_path / "deep.svm"
    path.write_bytes((good + "1 4:1 3:1\n" + good).encode())
    with pytest.raises(ValueError) as excinfo:
        load(path)
    assert_parse_error(excinfo, path, 30001, r"increasing|order")


def test_first_error_in_file_order(tmp_path, load):
    good = "".join("1 1:1\n" for _ in range(40000))
    path = tmp_path / "two-errors.svm"
    path.write_bytes((good + "1 0:1\n" + good + "1 1:x\n").encode())
    with pytest.raises(ValueError) as excinfo:
        load(path)
    assert_parse_error(excinfo, path, 40001, r"index")


def test_missing_file(tmp_path, load):
    path = tmp_path / "nope.svm"
    with pytest.raises(FileNotFoundError, match=re.escape(str(path))):
        load(path)


def test_corrupt_compressed_stream(tmp_path, load):
    path = tmp_path / "truncated.gz"
    path.write_bytes(gzip.compress(GOOD.encode() * 100)[:40])
    with pytest.raises(OSError, match=re.escape(str(path))):
        load(path)


# --- the embedded default data set and the shared real data sets --------------------------------


def test_load_default():
    from budgetsvm.datasets import load_default

    X_train, y_train, X_test, y_test = load_default()
    assert X_train.shape == (32561, 123)
    assert X_test.shape == (16281, 123)
    assert y_train.shape == (32561,) and y_test.shape == (16281,)
    assert set(np.unique(y_train)) == {-1.0, 1.0}
    assert set(np.unique(y_test)) == {-1.0, 1.0}
    for X in (X_train, X_test):
        assert sp.issparse(X) and X.format == "csr"
        assert set(np.unique(X.data)) == {1.0}  # a9a is binary
    a9a = SHARED_DATA / "a9a" / "a9a.xz"
    if a9a.exists():
        with lzma.open(a9a) as f:
            X_ref, y_ref = sk_load(f, zero_based=False, n_features=123)
        assert_same((X_train, y_train), (X_ref, y_ref))


@pytest.mark.parametrize(
    "relative, n_features",
    [("a9a/a9a.xz", 123), ("a9a/a9a.t.xz", 123), ("ijcnn1/ijcnn1.bz2", 22)],
)
def test_real_files_match_sklearn(load, relative, n_features):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent")
    path = SHARED_DATA / relative
    with OPENERS[path.suffix](path) as f:
        reference = sk_load(f, zero_based=False, n_features=n_features)
    assert_same(load(path, n_features=n_features), reference)
