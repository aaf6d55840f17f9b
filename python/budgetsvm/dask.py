"""Dask helpers: predict on dask arrays and dataframes in parallel, train over their chunks.

Needs the optional extra: ``pip install "budgetsvm[dask]"``.

Prediction is embarrassingly parallel: :func:`predict` and :func:`decision_function` map the
fitted estimator over the row blocks of a dask array (``map_blocks``) or the partitions of a
dask dataframe (``map_partitions``); the estimator is pickled to the workers once per task
graph, and the result is a lazy dask collection.

Training is sequential by nature (BSGD updates one model example by example), so
:func:`fit_incremental` walks the collection's chunks in order, has the cluster compute
(load, preprocess) each chunk, and feeds it to ``BudgetSVC.partial_fit`` in this process. It is
the pattern of dask-ml's ``Incremental`` wrapper: the cluster does the data work, memory in this
process stays at about two chunks plus the budget, and the result is the model that
``partial_fit`` over the same chunks in the same order gives.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

try:
    import dask
    import dask.array as da
    import dask.dataframe as dd
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'budgetsvm.dask needs dask: pip install "budgetsvm[dask]" '
        "(dask[array,dataframe,distributed])"
    ) from e

__all__ = ["decision_function", "fit_incremental", "predict"]


def _rows_only(X: Any) -> Any:
    """A dask array chunked along rows only (each block holds whole rows)."""
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D dask array, got {X.ndim} dimensions")
    return X if X.numblocks[1] == 1 else X.rechunk({1: -1})


def _frame_values(clf: Any, part: Any) -> Any:
    """A dataframe partition as the estimator expects it: with its column names when the
    estimator was fitted on named columns, as a plain array otherwise."""
    return part if hasattr(clf, "feature_names_in_") else part.to_numpy()


# Blocks and partitions with no rows (a filtered dataframe, an uneven rechunk) get empty results
# of the right shape: the estimators themselves reject empty input.


def _n_out(clf: Any) -> int:
    return 1 if len(clf.classes_) == 2 else len(clf.classes_)


def _predict_rows(clf: Any, X: Any) -> np.ndarray:
    if X.shape[0] == 0:
        return np.empty(0, dtype=clf.classes_.dtype)
    return clf.predict(X)


def _decision_rows(clf: Any, X: Any) -> np.ndarray:
    if X.shape[0] == 0:
        n_out = _n_out(clf)
        return np.empty((0,) if n_out == 1 else (0, n_out))
    return clf.decision_function(X)


def _predict_block(block: np.ndarray, clf: Any) -> np.ndarray:
    return _predict_rows(clf, block)


def _decision_block(block: np.ndarray, clf: Any) -> np.ndarray:
    return _decision_rows(clf, block)


def _predict_partition(part: Any, clf: Any) -> Any:
    import pandas as pd

    values = _predict_rows(clf, _frame_values(clf, part))
    return pd.Series(values, index=part.index, name="prediction")


def _decision_partition(part: Any, clf: Any) -> Any:
    import pandas as pd

    values = _decision_rows(clf, _frame_values(clf, part))
    if values.ndim == 1:
        return pd.Series(values, index=part.index, name="decision")
    return pd.DataFrame(values, index=part.index, columns=[str(c) for c in clf.classes_])


def predict(clf: Any, X: Any) -> Any:
    """Lazy predictions of a fitted estimator over a dask collection.

    Parameters
    ----------
    clf : BudgetSVC or KernelSVC
        A fitted estimator (sent to the workers).
    X : dask.array.Array or dask.dataframe.DataFrame
        Rows to predict.

    Returns
    -------
    dask.array.Array or dask.dataframe.Series
        For a dask array a 1-D dask array, one block per row block of X; for a dataframe a
        Series, one partition per partition.
    """
    if isinstance(X, dd.DataFrame):
        meta = dd.utils.make_meta(
            ("prediction", clf.classes_.dtype if clf.classes_.dtype.kind != "U" else object)
        )
        return X.map_partitions(_predict_partition, clf, meta=meta)
    if isinstance(X, da.Array):
        X = _rows_only(X)
        return X.map_blocks(
            _predict_block, clf, dtype=clf.classes_.dtype, drop_axis=1, chunks=(X.chunks[0],)
        )
    raise TypeError(f"X must be a dask array or dask dataframe, got {type(X).__name__}")


def decision_function(clf: Any, X: Any) -> Any:
    """Lazy decision values of a fitted estimator over a dask collection.

    Parameters
    ----------
    clf : BudgetSVC or KernelSVC
        A fitted estimator.
    X : dask.array.Array or dask.dataframe.DataFrame
        Rows to evaluate.

    Returns
    -------
    dask.array.Array or dask.dataframe.Series or dask.dataframe.DataFrame
        For a dask array: 1-D for two classes, (n, n_classes) otherwise; for a dataframe a
        Series for two classes, a DataFrame with one column per class otherwise.
    """
    n_out = _n_out(clf)
    if isinstance(X, dd.DataFrame):
        import pandas as pd

        if n_out == 1:
            meta: Any = pd.Series(dtype=np.float64, name="decision")
        else:
            meta = pd.DataFrame({str(c): pd.Series(dtype=np.float64) for c in clf.classes_})
        return X.map_partitions(_decision_partition, clf, meta=meta)
    if isinstance(X, da.Array):
        X = _rows_only(X)
        if n_out == 1:
            return X.map_blocks(
                _decision_block, clf, dtype=np.float64, drop_axis=1, chunks=(X.chunks[0],)
            )
        return X.map_blocks(_decision_block, clf, dtype=np.float64, chunks=(X.chunks[0], (n_out,)))
    raise TypeError(f"X must be a dask array or dask dataframe, got {type(X).__name__}")


def _blocks(X: Any, y: Any) -> list:
    """(X chunk, y chunk) pairs as delayed objects, in row order."""
    if isinstance(X, dd.DataFrame):
        if not isinstance(y, (dd.Series, dd.DataFrame)):
            raise TypeError("with a dask dataframe X, y must be a dask Series")
        if X.npartitions != y.npartitions:
            raise ValueError(
                f"X has {X.npartitions} partitions but y has {y.npartitions}; "
                "they must be partitioned alike"
            )
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
    """Train ``clf`` (a ``BudgetSVC`` with ``solver='bsgd'``) over the chunks of a dask
    collection: ``partial_fit`` on every row block of a dask array (with y a 1-D dask array) or
    every partition of a dask dataframe (with y a dask Series), in order, ``epochs`` times.

    The cluster computes the chunks, the next one while this process trains on the current
    one. ``classes`` is needed unless the estimator is already fitted (then training
    continues); ``n_samples`` (the total rows, default: the first chunk's) is passed to the
    first ``partial_fit`` call, see there.

    Parameters
    ----------
    clf : BudgetSVC
        With ``solver='bsgd'``.
    X : dask.array.Array or dask.dataframe.DataFrame
        Training rows.
    y : dask.array.Array or dask.dataframe.Series
        Labels, chunked or partitioned like X.
    classes : array-like, default=None
        Every label of the data (unless ``clf`` is already fitted).
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
    if classes is not None:
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
                clf.partial_fit(Xb, yb, classes=classes, n_samples=n_samples)
                first = False
            else:
                clf.partial_fit(Xb, yb)
    return clf
