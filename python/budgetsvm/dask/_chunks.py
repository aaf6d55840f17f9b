"""What prediction and training check of a dask collection: rows in whole blocks, and a
dataframe's target partitioned as its rows."""

from __future__ import annotations

from typing import Any

import dask.dataframe as dd


def _rows_only(X: Any) -> Any:
    """A dask array chunked along rows only (each block holds whole rows)."""
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D dask array, got {X.ndim} dimensions")
    return X if X.numblocks[1] == 1 else X.rechunk({1: -1})


def _check_dataframe_target(X: Any, y: Any) -> None:
    """A dask dataframe X's y must be a dask Series partitioned as X."""
    if not isinstance(y, (dd.Series, dd.DataFrame)):
        raise TypeError("with a dask dataframe X, y must be a dask Series")
    if X.npartitions != y.npartitions:
        raise ValueError(
            f"X has {X.npartitions} partitions but y has {y.npartitions}; "
            "they must be partitioned alike"
        )

