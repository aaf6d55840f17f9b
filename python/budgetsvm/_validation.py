"""Input normalisation shared by every estimator and function: one layout reaches Rust."""

from __future__ import annotations

import functools
import math
import numbers
import sys
import threading
import weakref
from typing import Any, Callable, NamedTuple, Optional, Tuple, TypeVar, Union

import numpy as np

from budgetsvm import _budgetsvm, _threads  # noqa: F401  (_threads: seen by threadpoolctl)

NativeX = Union[np.ndarray, tuple]


def to_native(X: Any) -> NativeX:
    """Dense C-contiguous float64 array, or CSR parts ``(data, indices, indptr, n_cols)``.

    ``X`` must already be validated (float64, finite, 2-D). The user's object is never modified:
    a CSR matrix with duplicate entries is summed into a copy, and its buffers are otherwise passed
    through without copying.
    """
    # scipy.sparse is imported only where it is used: X can only be one of its matrices if it
    # is already loaded (a Dask worker or the command line's predictions never load it).
    sp = sys.modules.get("scipy.sparse")
    if sp is not None and sp.issparse(X):
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
        import scipy.sparse as sp

        return sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, int(n_cols)))
    return sv


SV_STORAGES = ("auto", "dense", "sparse")


def _aligned(a: Any, dtype: Any = None) -> np.ndarray:
    """C-contiguous and aligned (buffers received over a network, e.g. from Dask workers, can
    be misaligned, which the native views reject); copies only when needed."""
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.flags.aligned else a.copy()


#: The largest integer parameter the engine takes (its counts are 64-bit).
MAX_INTEGER = 2**63 - 1


def shown(value: Any) -> str:
    """``repr(value)``, but an integer too long to read (or for Python to print: 4,300 digits)
    as its size."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if abs(int(value)) > 10**30:
            return f"an integer of {int(value).bit_length()} bits"
    return repr(value)


def is_finite(value: Any) -> bool:
    """Whether a number is finite as the engine's float64 sees it. A Python int too large for
    a float is not (numpy's isfinite raises TypeError on it, and float() OverflowError)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def check_integer(name: str, value: Any, minimum: int) -> None:
    """Raise ValueError unless ``value`` is an integer (not a bool) in [minimum, MAX_INTEGER]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {shown(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {shown(value)}")
    if value > MAX_INTEGER:
        raise ValueError(f"{name} must be an integer below 2**63, got {shown(value)}")


def check_positive(name: str, value: Any, *, integer: bool = False, minimum: float = 0.0) -> None:
    """Raise ValueError unless ``value`` is a finite number (an integer below 2**63 if asked)
    above ``minimum``."""
    if integer:
        check_integer(name, value, max(int(math.ceil(minimum)), 1))
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {shown(value)}")
    if not is_finite(value) or value < minimum or (minimum == 0.0 and value <= 0):
        bound = f">= {minimum:g}" if minimum > 0 else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {shown(value)}")


def check_nonnegative(name: str, value: Any) -> None:
    """Raise ValueError unless ``value`` is a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {shown(value)}")
    if not is_finite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {shown(value)}")


def check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def scale_gamma(n_features: int, var: float, context: str) -> float:
    """gamma='scale' of data with variance ``var``: 1 / (n_features * var), 1 for constant
    data. An unusable width (0, infinite) is an error, its message ending with ``context``
    (which data, what to do)."""
    value = 1.0 / (n_features * var) if var > 0 else 1.0
    if not (is_finite(value) and value > 0):
        raise ValueError(f"gamma='scale' gives an unusable kernel width ({value!r}) {context}")
    return value


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
            return scale_gamma(
                n_features,
                var,
                "for the variance of X; rescale the features or pass a numeric gamma",
            )
        if gamma == "auto":
            return 1.0 / n_features
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive number; got {gamma!r}")
    check_positive("gamma", gamma)
    return float(gamma)


def check_n_jobs(n_jobs: Any) -> Optional[int]:
    """An estimator's ``n_jobs`` as the engine's thread count: None (the process-wide setting of
    ``set_num_threads``), 0 for -1 (one thread per core), or the count itself."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs < -1:
        raise ValueError(
            f"n_jobs must be an integer >= 1, -1 (all cores) or None; got {shown(n_jobs)}"
        )
    if n_jobs == 0:
        raise ValueError("n_jobs must be None, -1 (all cores) or >= 1, got 0")
    if n_jobs > _budgetsvm.MAX_THREADS:
        raise ValueError(
            f"n_jobs={shown(n_jobs)} is more threads than the {_budgetsvm.MAX_THREADS} allowed; use -1 "
            "for one per core"
        )
    return 0 if n_jobs == -1 else int(n_jobs)


class TrainingRows(NamedTuple):
    """The rows a solver trains on, with their classes and weights (see ``training_rows``)."""

    X: Any
    classes: np.ndarray
    y_index: np.ndarray
    #: Positive weight per row (sample weight times class weight); None when unweighted.
    weights: Optional[np.ndarray]
    #: Indices of these rows in the caller's X; None when every row is kept.
    kept: Optional[np.ndarray]
    #: Weight of each class (ones without class_weight).
    class_weights: np.ndarray


def check_sample_weight(
    sample_weight: Any, n_rows: int, *, negative_allowed: bool = False
) -> np.ndarray:
    """A float64 copy of ``sample_weight``: one finite number per row, non-negative unless
    ``negative_allowed`` (a fit leaves rows of weight <= 0 out, as scikit-learn's SVMs)."""
    try:
        w = np.array(sample_weight, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"sample_weight must be numbers, one per row: {e}") from None
    if w.ndim == 0:
        w = np.full(n_rows, float(w))
    if w.shape != (n_rows,):
        raise ValueError(f"sample_weight has shape {w.shape}, expected ({n_rows},): one per row")
    if np.isnan(w).any():
        raise ValueError("sample_weight contains NaN")
    if np.isinf(w).any():
        raise ValueError("sample_weight must be finite (it contains inf)")
    if not negative_allowed and (w < 0).any():
        raise ValueError("sample_weight must be non-negative (found negative values)")
    return w


def weighted_rows(
    sample_weight: Any, n_rows: int
) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Checked ``sample_weight`` of the rows it keeps, and which rows those are: rows of weight
    <= 0 are left out, as if they were not in the data, as scikit-learn's SVMs do (kept is None
    when every row stays; weights is None without sample_weight). No row of positive weight is
    an error (scikit-learn's words, then ours)."""
    if sample_weight is None:
        return None, None
    weights = check_sample_weight(sample_weight, n_rows, negative_allowed=True)
    positive = weights > 0
    if not positive.any():
        raise ValueError(
            "Invalid input - all samples have zero or negative weights. (sample_weight is zero "
            "or negative for every row: at least one row needs a positive weight)"
        )
    if positive.all():
        return weights, None
    kept = np.flatnonzero(positive)
    return np.ascontiguousarray(weights[kept]), kept


def class_weights(class_weight: Any, classes: np.ndarray, y_index: Optional[np.ndarray] = None,
                  sample_weight: Optional[np.ndarray] = None, all_labels: Any = None) -> np.ndarray:
    """The weight of each class of ``classes``: ones for None; for a dict label -> weight the
    given weights (labels not given weigh 1; a label that is not a class of the data, nor in
    ``all_labels``, is an error); for 'balanced' n_rows / (n_classes * the class's total sample
    weight), from ``y_index`` and ``sample_weight``."""
    if class_weight is None:
        return np.ones(len(classes))
    if isinstance(class_weight, dict):
        known = classes if all_labels is None else all_labels
        unknown = [k for k in class_weight if not np.any(known == k)]
        if unknown:
            raise ValueError(
                f"class_weight has labels that are not classes of the data: {unknown!r} "
                f"(classes are {np.asarray(known).tolist()!r})"
            )
        per_class = np.array(
            [_weight_of(class_weight, c) for c in classes], dtype=np.float64
        )
    elif isinstance(class_weight, str) and class_weight == "balanced":
        if y_index is None:
            raise ValueError("class_weight='balanced' needs the class counts of the data")
        totals = np.bincount(y_index, weights=sample_weight, minlength=len(classes))
        with np.errstate(divide="ignore"):
            per_class = totals.sum() / (len(classes) * totals)
    else:
        raise ValueError(
            f"class_weight must be None, 'balanced' or a dict label -> weight; got "
            f"{class_weight!r}"
        )
    bad = ~(np.isfinite(per_class) & (per_class > 0))
    if bad.any():
        raise ValueError(
            f"class_weight must be a positive finite number for every class; got "
            f"{per_class[bad].tolist()!r} for classes {np.asarray(classes)[bad].tolist()!r}"
        )
    return per_class


def _weight_of(class_weight: dict, label: Any) -> float:
    for key, value in class_weight.items():
        if key == label:
            try:
                return float(value)
            except (TypeError, ValueError):
                raise ValueError(
                    f"class_weight for {label!r} must be a number, got {value!r}"
                ) from None
    return 1.0


def training_rows(
    name: str, X: Any, y: np.ndarray, sample_weight: Any, class_weight: Any
) -> TrainingRows:
    """Classes, class indices and row weights of validated ``X, y`` as SVC treats them: C of row
    i is C * sample_weight[i] * class_weight[y[i]]. Rows of sample weight 0 are left out, as if
    they were not in the data (so they add no class either); nothing the caller gave is
    modified. ``class_weight`` is None, a dict label -> weight (labels not given weigh 1), or
    'balanced': n_rows / (n_classes * weight of the class's rows)."""
    # Imported here: the command line's predictions use this module without scikit-learn.
    from sklearn.utils.multiclass import check_classification_targets

    check_classification_targets(y)
    given_y = y
    sw, kept = weighted_rows(sample_weight, X.shape[0])
    if kept is not None:
        X, y = X[kept], y[kept]
    classes, y_index = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        if kept is not None:
            raise ValueError(
                f"Invalid input - all samples with positive weights belong to the same class "
                f"({name} needs samples of at least two classes; the rows with a positive "
                f"sample weight contain only one class: {classes[0]!r})"
            )
        raise ValueError(
            f"{name} needs samples of at least two classes; the rows contain only one "
            f"class: {classes[0]!r}"
        )
    # A class-weight dict is checked against every label given, also those whose rows were all
    # left out by zero weights (only then does that need a second pass over the labels).
    all_labels = np.unique(given_y) if kept is not None and isinstance(class_weight, dict) else None
    per_class = class_weights(class_weight, classes, y_index, sw, all_labels)
    weights = sw
    if class_weight is not None:
        row_cw = per_class[y_index]
        weights = row_cw if weights is None else weights * row_cw
    if weights is not None:
        weights = np.ascontiguousarray(weights, dtype=np.float64)
    y_index = np.ascontiguousarray(y_index, dtype=np.uint32)
    return TrainingRows(X, classes, y_index, weights, kept, per_class)


_F = TypeVar("_F", bound=Callable[..., Any])
_fit_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_fit_locks_guard = threading.Lock()


def _fit_lock(estimator: Any) -> threading.Lock:
    with _fit_locks_guard:
        return _fit_locks.setdefault(estimator, threading.Lock())


def _being_fitted(estimator: Any) -> RuntimeError:
    return RuntimeError(
        f"this {type(estimator).__name__} is being fitted in another thread; wait for that "
        "fit to finish, or fit a clone (sklearn.base.clone)"
    )


def _detached_copy(estimator: Any) -> Any:
    """A second estimator object over a copy of ``estimator``'s attribute dict (the attributes'
    values shared, not copied). Taken in one step: ``dict.copy`` of string keys runs without
    releasing the GIL, and a fit never changes a dict a reader may hold (``fit_guard``)."""
    copy = object.__new__(type(estimator))
    copy.__dict__ = estimator.__dict__.copy()
    return copy


def fit_guard(method: _F) -> _F:
    """For an estimator's fit / partial_fit / fit_file / polish_coef: one fit at a time per
    estimator (a second one, or ``set_params``, from another thread raises RuntimeError saying
    so instead of racing on the fit), and the fitted state replaced as one unit.

    The method runs on a detached copy of the estimator and never writes to the estimator
    itself; when it returns, the copy's attribute dict becomes the estimator's in one
    assignment. So a fit that fails or is interrupted leaves the estimator exactly as it was,
    and the methods that read the model (``fitted_snapshot``) see the previous model or the
    new one, never a mix, whichever thread calls them during the refit. The methods must
    therefore replace attributes, never change their values in place."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        lock = _fit_lock(self)
        if not lock.acquire(blocking=False):
            raise _being_fitted(self)
        try:
            draft = _detached_copy(self)
            try:
                result = method(draft, *args, **kwargs)
            except KeyboardInterrupt:
                raise _interrupted(self, method, "the estimator is unchanged") from None
            self.__dict__ = draft.__dict__
            return self if result is draft else result
        finally:
            lock.release()

    return wrapper  # type: ignore[return-value]


def fitted_snapshot(method: _F) -> _F:
    """For a method that reads the fitted model (predict, decision_function, save, ...): runs it
    on a snapshot of the estimator's attributes, so that a refit finishing in another thread
    meanwhile cannot pair one model's gamma with another's support vectors (``fit_guard``)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(_detached_copy(self), *args, **kwargs)
        except KeyboardInterrupt:
            raise _interrupted(self, method, "nothing was returned") from None

    return wrapper  # type: ignore[return-value]


def _interrupted(
    estimator: Any, method: Any, outcome: str
) -> KeyboardInterrupt:
    """Ctrl-C's KeyboardInterrupt (Python's says nothing) saying what it stopped and what
    state it left."""
    return KeyboardInterrupt(
        f"{type(estimator).__name__}.{method.__name__} interrupted (Ctrl-C); {outcome}"
    )


class FitGuardedParams:
    """``set_params`` refused while the estimator is being fitted in another thread: the fit
    would otherwise replace the new parameters by those it started with."""

    def set_params(self, **params: Any) -> Any:
        lock = _fit_lock(self)
        if not lock.acquire(blocking=False):
            raise _being_fitted(self)
        try:
            return super().set_params(**params)  # type: ignore[misc]
        finally:
            lock.release()
