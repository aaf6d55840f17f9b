"""Sequential training over a dask collection's chunks (``budgetsvm.dask.fit_incremental``):
the cluster computes each chunk, this process trains on it with ``partial_fit``."""

from __future__ import annotations

from typing import Any, Optional

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np

from budgetsvm.dask._chunks import _check_dataframe_target, _rows_only


def _blocks(X: Any, y: Any) -> list:
    """(X chunk, y chunk) pairs as delayed objects, in row order."""
    if isinstance(X, dd.DataFrame):
        _check_dataframe_target(X, y)
        return list(zip(X.to_delayed(), y.to_delayed()))
    if isinstance(X, da.Array):
        if not isinstance(y, da.Array) or y.ndim != 1:
            raise TypeError("with a dask array X, y must be a 1-D dask array")
        X = _rows_only(X)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
        y = y.rechunk((X.chunks[0],))
        return list(zip(X.to_delayed()[:, 0], y.to_delayed()))
    raise TypeError(f"X must be a dask array or dask dataframe, got {type(X).__name__}")


def fit_incremental(
    clf: Any,
    X: Any,
    y: Any,
    classes: Any = None,
    *,
    epochs: int = 1,
    n_samples: Optional[int] = None,
) -> Any:
    """Train ``clf`` (a ``BudgetSVC`` or ``BudgetSVR`` with ``solver='bsgd'``) over the chunks
    of a dask collection: ``partial_fit`` on every row block of a dask array (with y a 1-D dask
    array) or every partition of a dask dataframe (with y a dask Series), in order, ``epochs``
    times.

    The cluster computes the chunks, the next one while this process trains on the current
    one. A classifier needs ``classes`` unless it is already fitted (then training
    continues); ``n_samples`` (the total rows, default: the first chunk's) is passed to the
    first ``partial_fit`` call, see there.

    Several classes train as ``partial_fit`` trains them: one-vs-one where ``multiclass``
    resolves to it (one run per class pair, the budget split equally over the pairs), the
    shared budget otherwise.

    Nothing is polished: the model is BSGD's. A regressor's last BSGD iterate is usable only
    with strong regularisation (small C; see ``docs/dask_scaling.md``); ``budgetsvm.dask.fit``
    trains with the polish.

    Parameters
    ----------
    clf : BudgetSVC or BudgetSVR
        With ``solver='bsgd'``.
    X : dask.array.Array or dask.dataframe.DataFrame
        Training rows.
    y : dask.array.Array or dask.dataframe.Series
        Labels (targets for a regressor), chunked or partitioned like X.
    classes : array-like, default=None
        Every label of the data (a classifier, unless ``clf`` is already fitted).
    epochs : int, default=1
        Passes over the chunks.
    n_samples : int, default=None
        Total rows, for the first ``partial_fit`` call.

    Returns
    -------
    clf : BudgetSVC
    """
    if not hasattr(clf, "partial_fit"):
        raise ValueError("fit_incremental needs an estimator with partial_fit (solver='bsgd')")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    pairs = _blocks(X, y)
    if not pairs:
        raise ValueError("the collection has no chunks")
    from sklearn.base import is_regressor

    regression = is_regressor(clf)
    if classes is not None:
        if regression:
            raise ValueError(f"classes is for classifiers; {type(clf).__name__} has targets")
        classes = np.asarray(classes)
    first = True
    for _ in range(epochs):
        pending = dask.persist(*pairs[0])
        for k in range(len(pairs)):
            current = pending
            pending = dask.persist(*pairs[k + 1]) if k + 1 < len(pairs) else None
            Xb, yb = dask.compute(*current)
            if hasattr(yb, "to_numpy"):
                yb = yb.to_numpy()
            yb = np.ravel(yb)
            if len(yb) == 0:
                continue
            if first:
                if regression:
                    clf.partial_fit(Xb, yb, n_samples=n_samples)
                else:
                    clf.partial_fit(Xb, yb, classes=classes, n_samples=n_samples)
                first = False
            else:
                clf.partial_fit(Xb, yb)
    return clf
