"""Dask helpers: predict on dask arrays and dataframes in parallel, train over their chunks.

Needs the optional extra: ``pip install "budgetsvm[dask]"``.

Prediction is embarrassingly parallel: :func:`predict` and :func:`decision_function` map the
fitted estimator over the row blocks of a dask array (``map_blocks``) or the partitions of a
dask dataframe (``map_partitions``); the estimator is pickled to the workers once per task
graph, and the result is a lazy dask collection.

Training across the cluster: :func:`fit` runs the budgeted pass on every partition in
parallel (each worker on the partitions it holds), pools the partitions' support vectors and
reduces the pool to the budget with the same budget maintenance a fit uses (several classes:
per class pair where one-vs-one is chosen, each partition filtering its rows by class), then
polishes the coefficients exactly over all rows, each Newton iteration a map over the partitions (their
kernel values K(X_p, S) kept on the workers that hold them) and a reduce on this process:
O(B^2) bytes per partition and iteration, never rows. The result is a plain fitted
``BudgetSVC`` or ``BudgetSVR`` (regression: the targets' weighted median over the partitions,
found exactly in three small maps, is the offset every partition centres by and the intercept
starts from; the
pool is reduced with the sign-mixed merges a regression fit uses; the polish is on the squared
epsilon-insensitive loss).

:func:`fit_incremental` is the sequential alternative: it walks the collection's chunks in
order, has the cluster compute (load, preprocess) each chunk, and feeds it to
``BudgetSVC.partial_fit`` in this process (dask-ml's ``Incremental`` pattern): one core trains,
and the result is the model that ``partial_fit`` over the same chunks in the same order gives.

:func:`search` fits a cross-validated estimator (``KernelSVCCV``, ``BudgetSVCCV``, ...) with the
fits of its search spread over the cluster, each round's at once.

The package by job: ``_predict`` (predict, decision_function), ``_incremental``
(fit_incremental), ``_fit`` (fit: its stages), ``_basis`` (the pooled or relayed basis),
``_pairs`` (fit one-vs-one), ``_polish`` (the distributed polish), ``_search`` (search),
``_chunks`` (the collections' checks they share). What the workers run for ``fit`` is
``budgetsvm._dask_tasks``, outside this package: a worker imports numpy and the engine only.
"""

from __future__ import annotations

try:
    import dask  # noqa: F401
    import dask.array  # noqa: F401
    import dask.dataframe  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'budgetsvm.dask needs dask: pip install "budgetsvm[dask]" '
        "(dask[array,dataframe,distributed])"
    ) from e

from budgetsvm.dask._fit import fit
from budgetsvm.dask._incremental import fit_incremental
from budgetsvm.dask._predict import decision_function, predict
from budgetsvm.dask._search import search

__all__ = ["decision_function", "fit", "fit_incremental", "predict", "search"]
