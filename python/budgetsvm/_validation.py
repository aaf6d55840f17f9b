"""Input normalisation shared by every estimator and function: one layout reaches Rust."""

from __future__ import annotations

import functools
import numbers
import threading
import weakref
from typing import Any, Callable, TypeVar, Union

import numpy as np
import scipy.sparse as sp

from budgetsvm import _budgetsvm

NativeX = Union[np.ndarray, tuple]


def to_native(X: Any) -> NativeX:
    """Dense C-contiguous float64 array, or CSR parts ``(data, indices, indptr, n_cols)``.

    ``X`` must already be validated (float64, finite, 2-D). The user's object is never modified:
    a CSR matrix with duplicate entries is summed into a copy, and its buffers are otherwise passed
    through without copying.
    """
    if sp.issparse(X):
        X = X.tocsr() if X.format != "csr" else X
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
        data = _aligned(X.data, np.float64)
        indices, indptr = X.indices, X.indptr
        if indices.dtype != indptr.dtype or indices.dtype not in (np.int32, np.int64):
            indices = indices.astype(np.int64)
            indptr = indptr.astype(np.int64)
        return (data, _aligned(indices), _aligned(indptr), X.shape[1])
    return _aligned(X, np.float64)


def sv_from_native(sv: NativeX) -> Any:
    """Support vectors as the engine returns them: a dense array, or CSR parts made into a
    ``scipy.sparse.csr_matrix`` (sparse storage: no array of n_features per vector)."""
    if isinstance(sv, tuple):
        data, indices, indptr, n_cols = sv
        return sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, int(n_cols)))
    return sv


SV_STORAGES = ("auto", "dense", "sparse")


def _aligned(a: Any, dtype: Any = None) -> np.ndarray:
    """C-contiguous and aligned (buffers received over a network, e.g. from Dask workers, can
    be misaligned, which the native views reject); copies only when needed."""
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.flags.aligned else a.copy()


def check_positive(name: str, value: Any, *, integer: bool = False, minimum: float = 0.0) -> None:
    """Raise ValueError unless ``value`` is a finite number (an integer if asked) above ``minimum``."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    if not np.isfinite(value) or value < minimum or (minimum == 0.0 and value <= 0):
        bound = f">= {minimum:g}" if minimum > 0 else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")


def check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def resolve_gamma(gamma: Any, X: Any) -> float:
    """scikit-learn's meaning of gamma: 'scale' = 1 / (n_features * X.var()), 'auto' = 1 / n_features."""
    n_features = X.shape[1]
    if isinstance(gamma, str):
        if gamma == "scale":
            var = _budgetsvm.feature_variance(to_native(X))
            if not np.isfinite(var):
                raise ValueError(
                    "gamma='scale' needs the variance of X, which overflows for these feature "
                    "values; rescale the features or pass a numeric gamma"
                )
            gamma_value = 1.0 / (n_features * var) if var > 0 else 1.0
            if not (np.isfinite(gamma_value) and gamma_value > 0):
                raise ValueError(
                    f"gamma='scale' gives an unusable kernel width ({gamma_value!r}) for the "
                    "variance of X; rescale the features or pass a numeric gamma"
                )
            return gamma_value
        if gamma == "auto":
            return 1.0 / n_features
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive number; got {gamma!r}")
    check_positive("gamma", gamma)
    return float(gamma)


_F = TypeVar("_F", bound=Callable[..., Any])
_fit_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_fit_locks_guard = threading.Lock()


def fit_guard(method: _F) -> _F:
    """For an estimator's fit / partial_fit / fit_file: one fit at a time per estimator (a second
    one from another thread raises RuntimeError saying so, instead of racing on the native state;
    predict from other threads keeps working on the previous model), and a fit that fails or is
    interrupted leaves the estimator as it was before the call (no new ``classes_`` with old
    support vectors)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _fit_locks_guard:
            lock = _fit_locks.setdefault(self, threading.Lock())
        if not lock.acquire(blocking=False):
            raise RuntimeError(
                f"this {type(self).__name__} is being fitted in another thread; wait for that "
                "fit to finish, or fit a clone (sklearn.base.clone)"
            )
        saved = dict(self.__dict__)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise
        finally:
            lock.release()

    return wrapper  # type: ignore[return-value]
