"""Data loading: a fast LIBSVM/svmlight reader (Rust, parallel) and the embedded default data set."""

from __future__ import annotations

import os
from importlib import resources
from typing import Iterator, Optional, Tuple, Union

import numpy as np
import scipy.sparse as sp

from budgetsvm import _budgetsvm

PathLike = Union[str, "os.PathLike[str]"]


def load_svmlight_file(
    path: PathLike, n_features: Optional[int] = None
) -> Tuple[sp.csr_matrix, np.ndarray]:
    """Read a LIBSVM / svmlight file (plain, .gz, .bz2 or .xz; detected from the content).

    Returns ``(X, y)`` like :func:`sklearn.datasets.load_svmlight_file`: X a CSR matrix of float64
    with 0-based columns (the file's indices are 1-based), y a float64 array of labels.
    ``n_features`` widens X to at least that many columns (test files often lack the last
    features of the training file); a file with more features than ``n_features`` is an error.

    Parameters
    ----------
    path : str or path-like
        The file.
    n_features : int, default=None
        The width of X (at least the file's largest feature index).

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_rows, n_features)
    y : ndarray of shape (n_rows,)

    Raises
    ------
    FileNotFoundError, OSError
        The file cannot be read or is not a valid compressed stream.
    ValueError
        A malformed line; the message names the file and the 1-based line number.
    """
    path = os.fspath(path)
    data, indices, indptr, labels, width = _budgetsvm.load_libsvm(path)
    if n_features is not None:
        if (
            isinstance(n_features, bool)
            or not isinstance(n_features, (int, np.integer))
            or n_features < 0
        ):
            raise ValueError(f"n_features must be a non-negative integer, got {n_features!r}")
        if width > n_features:
            raise ValueError(
                f"{path} has features up to index {width}, more than n_features={n_features}"
            )
        width = int(n_features)
    X = sp.csr_matrix((data, indices, indptr), shape=(len(labels), width))
    return X, labels


def iter_svmlight_chunks(
    path: PathLike, chunk_rows: int = 100_000, n_features: Optional[int] = None
) -> Iterator[Tuple[sp.csr_matrix, np.ndarray]]:
    """Read a LIBSVM / svmlight file (plain, .gz, .bz2 or .xz) in chunks, never whole.

    Yields ``(X, y)`` for each run of at most ``chunk_rows`` lines (blank and comment lines give
    no row), X a CSR matrix with ``n_features`` columns. Without ``n_features`` each chunk is
    as wide as its own largest index, so pass the width when the chunks must line up (for
    ``partial_fit`` or ``predict``). Memory is one chunk. Errors as in
    :func:`load_svmlight_file`, with the line number within the whole file.

    Parameters
    ----------
    path : str or path-like
        The file.
    chunk_rows : int, default=100_000
        Lines per chunk.
    n_features : int, default=None
        The width of every chunk's X.

    Yields
    ------
    X : scipy.sparse.csr_matrix
    y : ndarray
    """
    path = os.fspath(path)
    if n_features is not None and (
        isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer))
    ):
        raise ValueError(f"n_features must be a non-negative integer, got {n_features!r}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)):
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    for data, indices, indptr, labels, width in _budgetsvm.LibsvmChunkReader(path, int(chunk_rows)):
        if n_features is not None:
            if width > n_features:
                raise ValueError(
                    f"{path} has features up to index {width}, more than n_features={n_features}"
                )
            width = int(n_features)
        yield sp.csr_matrix((data, indices, indptr), shape=(len(labels), width)), labels


def load_default() -> Tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix, np.ndarray]:
    """The embedded default data set: a9a (UCI Adult, LIBSVM's binary version), official split.

    32,561 training and 16,281 test rows, 123 binary features, labels -1/+1. The papers' setting
    for it is C = 2^5, gamma = 2^-7 (LIBSVM reaches 84.82% test accuracy).

    Returns
    -------
    X_train : scipy.sparse.csr_matrix of shape (32561, 123)
    y_train : ndarray of shape (32561,)
    X_test : scipy.sparse.csr_matrix of shape (16281, 123)
    y_test : ndarray of shape (16281,)
    """
    root = resources.files("budgetsvm") / "data"
    with resources.as_file(root / "a9a.xz") as train_path:
        X_train, y_train = load_svmlight_file(train_path, n_features=123)
    with resources.as_file(root / "a9a.t.xz") as test_path:
        X_test, y_test = load_svmlight_file(test_path, n_features=123)
    return X_train, y_train, X_test, y_test
