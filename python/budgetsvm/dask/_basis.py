"""The basis of ``budgetsvm.dask.fit``: the partitions' budgeted models pooled and reduced to
the budget, or (a regression with BSCA) one BSCA run relayed through the partitions."""

from __future__ import annotations

import numpy as np


def _pooled_basis(models: list, budget: int, gamma: float, params: dict, merge: str,
                  regression: bool) -> tuple:
    """The partitions' models (None: no rows) pooled, each weighted by its share of the rows,
    and reduced to ``budget`` by budget maintenance: (support vectors, coef, rows used, basis
    figures)."""
    import time

    from budgetsvm import _budgetsvm

    kept = [m for m in models if m is not None]
    if not kept:
        raise ValueError(
            "sample_weight is zero for every row: at least one row needs a non-zero weight"
        )
    used = sum(m[2] for m in kept)
    pool_sv = np.vstack([m[0] for m in kept])
    pool_coef = np.vstack([m[1] * (m[2] / used) for m in kept])
    t1 = time.perf_counter()
    sv, coef, pool_wd = _budgetsvm.reduce_budget(
        int(budget), support_vectors=np.ascontiguousarray(pool_sv),
        coef=np.ascontiguousarray(pool_coef), gamma=gamma, maintenance=params["maintenance"],
        merge=merge, sv_storage="dense", opposite_sign_merges=regression,
    )
    basis = dict(
        basis="pool",
        empty_partitions=len(models) - len(kept),
        pooled_support_vectors=int(pool_sv.shape[0]),
        pool_weight_degradation=float(pool_wd),
        reduce_seconds=time.perf_counter() - t1,
    )
    return sv, coef, int(used), basis


def _relay(client, x_parts, y_parts, w_parts, facts, params, seeds, targets):
    """The regression's basis: one BSCA run relayed through the partitions, ``epochs`` passes,
    each partition's leg continuing the model the one before left, its rows' dual variables
    kept on its worker between passes (only the model, B support vectors, travels). Every row
    is a coordinate of the one dual, as in ``BudgetSVR.fit``: merging partitions' separate
    models into B lost R^2 (docs/dask_scaling.md). A lone partition runs its epochs
    in one leg, as the single process does. Returns (support vectors, coef, rows used)."""
    import operator

    from budgetsvm._dask_tasks import _relay_partition
    from budgetsvm._validation import _aligned

    held = [k for k, f in enumerate(facts) if f["rows"] > 0]
    epochs = int(params["epochs"])
    # (epochs of a leg, epochs before it): one leg of every epoch, or one pass per epoch.
    passes = [(epochs, 0)] if len(held) == 1 else [(1, p) for p in range(epochs)]
    model, alphas, used = None, {}, {}
    for leg_epochs, done in passes:
        for k in held:
            seed = (seeds[k] + 104729 * done) % (2**31 - 1)
            leg = client.submit(
                _relay_partition, x_parts[k], y_parts[k], w_parts[k], params, seed, targets,
                model, alphas.get(k), done, leg_epochs, pure=False,
            )
            model = client.submit(operator.getitem, leg, 0, pure=False)
            alphas[k] = client.submit(operator.getitem, leg, 1, pure=False)
            used[k] = client.submit(operator.getitem, leg, 2, pure=False)
    result, counts = client.gather([model, list(used.values())])
    if result is None or sum(counts) == 0:
        raise ValueError(
            "sample_weight is zero for every row: at least one row needs a non-zero weight"
        )
    sv, coef = (_aligned(np.asarray(result[key])) for key in ("support_vectors", "coef"))
    return sv, coef, int(sum(counts))
