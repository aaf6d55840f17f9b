"""The Gaussian (RBF) kernel computed by the Rust engine, rows in parallel."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from sklearn.utils import check_array

from budgetsvm import _budgetsvm
from budgetsvm._validation import check_positive, to_native


def rbf_kernel(X: Any, Y: Optional[Any] = None, gamma: Optional[float] = None) -> np.ndarray:
    """Kernel matrix ``K[i, j] = exp(-gamma * ||X[i] - Y[j]||^2)``.

    Same contract as :func:`sklearn.metrics.pairwise.rbf_kernel`: dense or sparse inputs,
    ``Y=None`` means ``Y = X``, ``gamma=None`` means ``1 / n_features``. Rows are computed in
    parallel on :func:`budgetsvm.set_num_threads` threads.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples_X, n_features)
    Y : {array-like, sparse matrix} of shape (n_samples_Y, n_features), default=None
    gamma : float, default=None

    Returns
    -------
    ndarray of shape (n_samples_X, n_samples_Y)

    Examples
    --------
    >>> import numpy as np
    >>> from budgetsvm.kernels import rbf_kernel
    >>> rbf_kernel(np.array([[0.0, 0.0], [1.0, 0.0]]), gamma=0.5).round(4)
    array([[1.    , 0.6065],
           [0.6065, 1.    ]])
    """
    X = check_array(X, accept_sparse="csr", dtype=np.float64, order="C")
    Y = X if Y is None else check_array(Y, accept_sparse="csr", dtype=np.float64, order="C")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X has {X.shape[1]} features but Y has {Y.shape[1]}")
    if gamma is None:
        gamma = 1.0 / X.shape[1]
    check_positive("gamma", gamma)
    return _budgetsvm.rbf_kernel(to_native(X), to_native(Y), float(gamma))
