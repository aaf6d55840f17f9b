"""``budgetsvm.dask.search``: a cross-validated estimator's search with its fits spread over a
dask cluster (imported by ``budgetsvm.dask``, which checks that dask is installed).

The search is the estimator's own (``SearchCV.fit``: the same grid, folds, halving rounds,
budget ladders, scores and ``cv_results_``); only where its tasks run changes. A round's
tasks, one per fold and path (a gamma's Cs on a fold's training rows, fitted along the C path
and scored on the fold's validation rows), or one per fold for a point of a budget ladder,
run on the workers at once; the data are scattered to the workers once and each task slices
its fold there, so a task ships indices, not rows. The refit runs here.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from budgetsvm._search_cv import SearchCV, TaskMap


class DaskTaskMap(TaskMap):
    """A search's tasks on a dask.distributed client, all of a round's at once."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def put(self, X: Any, y: Any, weights: Optional[np.ndarray]) -> Tuple[Any, Any, Any]:
        data = [X, y] if weights is None else [X, y, weights]
        # Fresh keys (not the content's hash): a search after this one on the same data would
        # otherwise share them, and lose them when this search's futures are released.
        futures = self.client.scatter(data, broadcast=True, hash=False)
        return futures[0], futures[1], None if weights is None else futures[2]

    def map(
        self, fn: Callable[..., Any], jobs: List[tuple], done: Callable[[int], Any]
    ) -> List[Any]:
        from distributed import as_completed

        futures = [self.client.submit(fn, *args, pure=False) for args in jobs]
        index = {f.key: j for j, f in enumerate(futures)}
        try:
            for future in as_completed(futures):
                future.result()  # a task's error raised here, as the local search raises it
                done(index[future.key])
            return self.client.gather(futures)
        finally:
            # Ctrl-C or a failed task: nothing of this search keeps running on the cluster.
            self.client.cancel([f for f in futures if not f.done()])


def search(
    estimator: Any,
    X: Any,
    y: Any,
    sample_weight: Any = None,
    groups: Any = None,
    *,
    client: Any = None,
) -> Any:
    """Fit a cross-validated estimator (``KernelSVCCV``, ``KernelSVRCV``, ``KernelNuSVCCV``,
    ``KernelNuSVRCV``, ``BudgetSVCCV``, ``BudgetSVRCV``) with the fits of its search spread
    over a dask cluster: each round's fits, one task per fold and gamma (the Cs of a path stay
    one task: they share its kernel rows and warm starts), run on the workers at once. The
    search is the one ``estimator.fit`` runs (the same candidates, rounds, scores and
    ``cv_results_``); the refit of the best point runs in this process.

    For grids that outgrow one machine: the data (numpy arrays or a CSR matrix, as ``fit``
    takes) must fit in memory here and on each worker, where they are scattered once. Each
    fit on a worker uses the estimator's ``n_jobs`` threads; start the workers with as many
    threads each (``LocalCluster(threads_per_worker=1)`` and ``n_jobs=1`` run one fit per core).

    Parameters
    ----------
    estimator : a budgetsvm cross-validated estimator
        Fitted in place (as ``fit`` does) and returned.
    X, y, sample_weight, groups
        As the estimator's ``fit``.
    client : distributed.Client, default=None
        The cluster's client (None: the default client).

    Returns
    -------
    estimator
    """
    if not isinstance(estimator, SearchCV):
        raise TypeError(
            "budgetsvm.dask.search takes a budgetsvm cross-validated estimator (KernelSVCCV, "
            f"BudgetSVCCV, ...), got {type(estimator).__name__}; for other estimators use "
            "joblib's dask backend"
        )
    if client is None:
        from distributed import default_client

        try:
            client = default_client()
        except ValueError:
            raise ValueError(
                "budgetsvm.dask.search needs a dask.distributed Client (e.g. "
                "Client(LocalCluster())) or client="
            ) from None
    return estimator.fit(X, y, sample_weight, groups, _map=DaskTaskMap(client))
