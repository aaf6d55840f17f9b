"""Prediction over a dask collection (``budgetsvm.dask.predict``, ``decision_function``): the
fitted estimator mapped over the row blocks of a dask array (``map_blocks``) or the partitions
of a dask dataframe (``map_partitions``)."""

from __future__ import annotations

from typing import Any

import dask.array as da
import dask.dataframe as dd
import numpy as np

from budgetsvm.dask._chunks import _rows_only


def _frame_values(clf: Any, part: Any) -> Any:
    """A dataframe partition as the estimator expects it: with its column names when the
    estimator was fitted on named columns, as a plain array otherwise."""
    return part if hasattr(clf, "feature_names_in_") else part.to_numpy()


# Blocks and partitions with no rows (a filtered dataframe, an uneven rechunk) get empty results
# of the right shape: the estimators themselves reject empty input.


def _n_out(clf: Any) -> int:
    classes = getattr(clf, "classes_", ())
    return len(classes) if len(classes) > 2 else 1


def _prediction_dtype(clf: Any) -> np.dtype:
    """Labels' dtype, or float64 for a regression (or novelty detection's +-1)."""
    classes = getattr(clf, "classes_", None)
    return np.dtype(np.float64) if classes is None else classes.dtype


def _predict_rows(clf: Any, X: Any) -> np.ndarray:
    if X.shape[0] == 0:
        return np.empty(0, dtype=_prediction_dtype(clf))
    return np.asarray(clf.predict(X), dtype=_prediction_dtype(clf))


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
    clf : estimator
        A fitted budgetsvm (or any scikit-learn) estimator, sent to the workers: labels, or
        values for a regressor.
    X : dask.array.Array or dask.dataframe.DataFrame
        Rows to predict.

    Returns
    -------
    dask.array.Array or dask.dataframe.Series
        For a dask array a 1-D dask array, one block per row block of X; for a dataframe a
        Series, one partition per partition.
    """
    dtype = _prediction_dtype(clf)
    if isinstance(X, dd.DataFrame):
        meta = dd.utils.make_meta(("prediction", dtype if dtype.kind != "U" else object))
        return X.map_partitions(_predict_partition, clf, meta=meta)
    if isinstance(X, da.Array):
        X = _rows_only(X)
        return X.map_blocks(_predict_block, clf, dtype=dtype, drop_axis=1, chunks=(X.chunks[0],))
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
