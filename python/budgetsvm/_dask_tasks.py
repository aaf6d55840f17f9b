"""What the Dask workers run for ``budgetsvm.dask.fit``: the budgeted pass on a partition, the
polish's sums over a worker's partitions. A module of its own that imports nothing but numpy and
the engine, so that a fresh worker process starts these tasks without importing pandas,
dask.dataframe, scipy or scikit-learn."""

from __future__ import annotations

from typing import Any

import numpy as np


def _aligned(a: Any) -> np.ndarray:
    """C-contiguous and aligned (arrays off the network may be misaligned)."""
    a = np.ascontiguousarray(a)
    return a if a.flags.aligned else a.copy()

# Partitions' kernel values for the polish, kept in the worker process that computed them,
# keyed by (fit token, partition index). A lost worker loses its entries; the retried task
# recomputes them (the sums are a pure function of the partition and the point).
_WORKER_CACHE: dict = {}


def _forget(token: str) -> None:
    for key in [k for k in _WORKER_CACHE if k[0] == token]:
        del _WORKER_CACHE[key]


def _use_worker_threads() -> None:
    """The engine's pool sized to the worker's threads (a worker process per core must not run
    a pool of every core each)."""
    from budgetsvm import _budgetsvm

    try:
        from distributed import get_worker

        n = get_worker().state.nthreads
    except (ImportError, ValueError, AttributeError):
        return
    if n and _budgetsvm.get_num_threads() != n:
        _budgetsvm.set_num_threads(int(n))


def _n_classes(targets: dict) -> int:
    """The engine's n_classes for ``targets``: 0 for a regression, 2 for a class pair."""
    if "epsilon" in targets:
        return 0
    return 2 if "pair" in targets else len(targets["classes"])


def _partition_rows(X: Any, y: Any, w: Any, targets: dict):
    """A partition's rows as the engine takes them: (X native, targets, weights or None), rows
    of weight 0 left out. ``targets`` says what y is: {"classes", "class_w"} (class indices
    made from the labels), with "pair" = (a, b) the rows of classes a and b only as 0 and 1
    (one-vs-one's binary problem of that pair), or {"epsilon"} (real values)."""
    # Nothing here imports scikit-learn: a worker process would pay a second for it.
    from budgetsvm._validation import check_sample_weight, to_native

    X = np.asarray(X.to_numpy() if hasattr(X, "to_numpy") else X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"a partition of X is not 2-D ({X.ndim} dimensions)")
    y = np.ravel(y.to_numpy() if hasattr(y, "to_numpy") else np.asarray(y))
    if len(y) != X.shape[0]:
        raise ValueError(f"a partition has {X.shape[0]} rows of X but {len(y)} labels")
    if not np.all(np.isfinite(X)):
        raise ValueError("Input X contains NaN or infinity")
    weights = None
    if "epsilon" in targets:
        values = _target_values(y)
        if w is not None:
            w = np.ravel(w.to_numpy() if hasattr(w, "to_numpy") else np.asarray(w))
            weights = check_sample_weight(w, len(y))
    else:
        classes, class_w = targets["classes"], targets["class_w"]
        pos = np.minimum(np.searchsorted(classes, y), len(classes) - 1)
        if len(y) and np.any(classes[pos] != y):
            raise ValueError(
                f"y contains labels not in classes: {np.unique(y[classes[pos] != y])!r}"
            )
        values = np.ascontiguousarray(pos, dtype=np.uint32)
        if w is not None or not bool(np.all(class_w == 1.0)):
            weights = np.ones(len(y))
            if w is not None:
                w = np.ravel(w.to_numpy() if hasattr(w, "to_numpy") else np.asarray(w))
                weights = check_sample_weight(w, len(y))
            weights = weights * class_w[values]
        if "pair" in targets:
            a, b = targets["pair"]
            inside = (values == a) | (values == b)
            if not np.all(inside):
                X, values = X[inside], values[inside]
                weights = None if weights is None else weights[inside]
            values = np.ascontiguousarray(values == b, dtype=np.uint32)
    if weights is not None:
        keep = weights > 0
        if not np.all(keep):
            X, values, weights = X[keep], values[keep], weights[keep]
        weights = _aligned(weights)
    return to_native(np.ascontiguousarray(X)), _aligned(values), weights


def _target_values(y: Any) -> np.ndarray:
    """Regression targets: finite float64."""
    try:
        values = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"regression targets must be numbers, got dtype {y.dtype}") from None
    if not np.all(np.isfinite(values)):
        raise ValueError("y contains NaN or infinity")
    return values


def _block_targets(y: Any, w: Any) -> tuple:
    """A block's regression targets and row weights (finite float64, weights checked), the
    rows of weight 0 left out as a fit leaves them out."""
    values = _target_values(np.ravel(y.to_numpy() if hasattr(y, "to_numpy") else np.asarray(y)))
    if w is None:
        return values, np.ones(len(values))
    from budgetsvm._validation import check_sample_weight

    w = np.ravel(w.to_numpy() if hasattr(w, "to_numpy") else np.asarray(w))
    weights = check_sample_weight(w, len(values))
    return values[weights > 0], weights[weights > 0]


# The targets' weighted median over the partitions (the offset a regression fit centres by,
# `budget_svr.target_offset`), exactly, in three maps that move a few hundred numbers per
# partition: each partition's quantiles as thresholds, each partition's weight at or below
# every threshold (which brackets the median between two of them), and each partition's
# targets inside that bracket.
MEDIAN_THRESHOLDS = 256


def _target_thresholds(y: Any, w: Any) -> np.ndarray:
    values = np.sort(_block_targets(y, w)[0])
    if len(values) == 0:
        return values
    return values[np.linspace(0, len(values) - 1, min(len(values), MEDIAN_THRESHOLDS)).astype(int)]


def _weight_at_or_below(y: Any, w: Any, thresholds: np.ndarray) -> np.ndarray:
    values, weights = _block_targets(y, w)
    order = np.argsort(values, kind="stable")
    cumulative = np.r_[0.0, np.cumsum(weights[order])]
    return cumulative[np.searchsorted(values[order], thresholds, side="right")]


def _targets_in(y: Any, w: Any, low: float, high: float) -> tuple:
    values, weights = _block_targets(y, w)
    inside = (values > low) & (values <= high)
    return values[inside], weights[inside]


def _block_facts(X: Any, y: Any, w: Any, regression: bool) -> dict:
    """What the driver needs of a block before training: rows, width, the sums of the entries
    (gamma='scale'), and the labels with their counts (classes) or the targets' total weight
    (regression)."""
    X = np.asarray(X.to_numpy() if hasattr(X, "to_numpy") else X, dtype=np.float64)
    y = np.ravel(y.to_numpy() if hasattr(y, "to_numpy") else np.asarray(y))
    facts = dict(
        rows=X.shape[0],
        width=X.shape[1] if X.ndim == 2 else 0,
        sum=float(X.sum()),
        sum_sq=float((X * X).sum()),
    )
    if regression:
        facts.update(sum_w=float(_block_targets(y, w)[1].sum()))
    else:
        labels, counts = (
            np.unique(y, return_counts=True) if len(y) else (y[:0], np.zeros(0, int))
        )
        # The rows each label keeps (a weight of 0 leaves a row out): one-vs-one's pair rows.
        kept = counts
        if w is not None and len(y):
            w = np.ravel(w.to_numpy() if hasattr(w, "to_numpy") else np.asarray(w))
            try:
                positive = np.asarray(w, dtype=np.float64) > 0
            except (TypeError, ValueError):  # bad weights: the partition's task says why
                positive = None
            if positive is not None and positive.shape == y.shape:
                kept = np.bincount(np.searchsorted(labels, y[positive]), minlength=len(labels))
        facts.update(labels=labels, counts=counts, kept_counts=kept)
    return facts


def _fit_partition(X: Any, y: Any, w: Any, params: dict, seed: int, targets: dict) -> Any:
    """The budgeted pass on one partition: (support vectors, coef, rows used) or None.
    Regression targets are centred by ``params["offset"]`` (the intercept carries it)."""
    from budgetsvm import _budgetsvm

    _use_worker_threads()
    Xn, values, weights = _partition_rows(X, y, w, targets)
    n = len(values)
    if n == 0:
        return None
    n_classes = _n_classes(targets)
    if "epsilon" in targets:
        values = np.ascontiguousarray(values - params["offset"])
    common = _run_settings(params, n, params["epochs"], seed, weights, targets)
    if params["solver"] == "bsca":
        r = _budgetsvm.fit_bsca(
            Xn, values, n_classes, dual_step=params["dual_step"], average=params["average"], **common
        )
    else:
        r = _budgetsvm.fit_bsgd(
            Xn, values, n_classes, average=params["average"], lambda_=params["lam"], **common
        )
    return np.asarray(r["support_vectors"]), np.asarray(r["coef"]), n


def _run_settings(
    params: dict, n: int, epochs: int, seed: int, weights: Any, targets: dict
) -> dict:
    """The engine's keywords of a budgeted run on a partition (C from ``lam`` over ``n``
    rows)."""
    return dict(
        c=params["C"] if params["lam"] is None else 1.0 / (n * params["lam"]),
        gamma=params["gamma"],
        budget=params["budget"],
        epochs=epochs,
        maintenance=params["maintenance"],
        merge=params["merge"],
        seed=seed,
        shuffle=params["shuffle"],
        sv_storage="dense",
        sample_weight=weights,
        epsilon=targets.get("epsilon"),
    )


def _relay_partition(
    X: Any, y: Any, w: Any, params: dict, seed: int, targets: dict, start: Any, alpha: Any,
    epochs_done: int, epochs: int,
) -> Any:
    """A leg of the regression's BSCA relay (``budgetsvm.dask.fit``): the run continued on this
    partition from ``start``, the model the partition before left (None: the first), and, on a
    later pass, from this partition's dual variables ``alpha`` (they stay on this worker).
    Returns (model, alpha, rows used); an empty partition passes the model on unchanged."""
    from budgetsvm import _budgetsvm

    _use_worker_threads()
    Xn, values, weights = _partition_rows(X, y, w, targets)
    n = len(values)
    if n == 0:
        return start, alpha, 0
    if start is not None:  # off the network: maybe misaligned
        start = {k: _aligned(v) if isinstance(v, np.ndarray) else v for k, v in start.items()}
    r = _budgetsvm.fit_bsca(
        Xn,
        np.ascontiguousarray(values - params["offset"]),
        0,
        dual_step=params["dual_step"],
        start=start,
        start_alpha=None if alpha is None else _aligned(alpha),
        epochs_done=epochs_done,
        return_alpha=True,
        # One run over all rows: lambda's C from all of them.
        **_run_settings(params, params["n_rows"], epochs, seed, weights, targets),
    )
    model = dict(
        support_vectors=np.asarray(r["support_vectors"]),
        coef=np.asarray(r["coef"]),
        gamma=params["gamma"],
    )
    return model, np.asarray(r["alpha"]), n


def _aligned_request(request: tuple) -> tuple:
    """A polish request with its arrays aligned (arrays off the network may not be):
    ("sums", trial point, counted point or None, changes) -- the losses between the points and,
    with ``changes``, the change of the Newton system --, ("line", counted point, direction, C,
    start (n_out), most) -- the line search's part beyond each output's start --,
    ("gradient", point) or ("hv", point, vectors (n_out, m + 1)) for the Hessian-free
    direction; a point being (coef, intercept)."""
    from budgetsvm._validation import to_native

    def point(p: Any) -> Any:
        return None if p is None else tuple(to_native(np.asarray(a)) for a in p)

    kind = request[0]
    if kind == "sums":
        return ("sums", point(request[1]), point(request[2]), bool(request[3]))
    if kind == "gradient":
        return ("gradient", point(request[1]))
    if kind == "hv":
        return ("hv", point(request[1]), to_native(np.asarray(request[2])))
    _, counted, direction, c, start, most = request
    return ("line", point(counted), point(direction), float(c), to_native(np.asarray(start)), int(most))


def _answer(part: Any, request: tuple) -> Any:
    kind = request[0]
    if kind == "sums":
        _, trial, counted, changes = request
        counted = () if counted is None else counted
        return part.sums(*trial, *counted, changes=changes)
    if kind == "gradient":
        return part.gradient(*request[1])
    if kind == "hv":
        return part.hessian_product(*request[1], request[2])
    _, counted, direction, c, start, most = request
    return part.line_changes(*counted, *direction, c, start, most)


def _combine(results: list, request: tuple, m: int) -> Any:
    """Several partitions' answers as one, added in the order given."""
    if request[0] == "sums":
        return combine_sums(results, m)
    if not results:
        return None
    if request[0] == "hv":
        return sum(results[1:], results[0].copy())
    if request[0] == "line":
        return combine_line(results)
    return {key: sum(r[key] for r in results) for key in results[0]}


def _polish_group(context: dict, parts: list, request: tuple) -> Any:
    """A polish request (see ``_aligned_request``: an iteration's sums, or the line search's)
    answered over the partitions this worker holds and added here in partition order: one task
    per worker and round, and one result, O(B^2) bytes whatever its rows (None without rows).
    Each partition's kernel values are computed on the first call and kept in this worker while
    they fit the cache."""
    from budgetsvm import _budgetsvm
    from budgetsvm._validation import to_native

    _use_worker_threads()
    request = _aligned_request(request)
    results = []
    cached = True
    for index, X, y, w in sorted(parts, key=lambda p: p[0]):
        key = (context["token"], index)
        part = _WORKER_CACHE.get(key)
        if part is None:
            targets = context["targets"]
            Xn, values, weights = _partition_rows(X, y, w, targets)
            if len(values) == 0:
                continue
            part = _budgetsvm.PolishPartition(
                to_native(np.asarray(context["basis"])),
                context["gamma"],
                Xn,
                values,
                _n_classes(targets),
                sample_weight=weights,
                epsilon=targets.get("epsilon"),
            )
            if part.nbytes <= context["cache_bytes"]:
                _WORKER_CACHE[key] = part
            else:
                cached = False
        results.append(_answer(part, request))
    try:
        from distributed import get_worker

        address = get_worker().address
    except (ImportError, ValueError):
        address = None
    return dict(
        result=_combine(results, request, len(context["basis"])),
        cached=cached,
        address=address,
        indices=[p[0] for p in parts],
    )


class PolishActor:
    """The later rounds of a worker's polish without the scheduler (a Dask actor on the worker
    whose cache holds the partitions' kernel values, built by the first round's task): a round
    costs a direct call, about a millisecond, instead of a task."""

    def __init__(self, token: str, indices: list, m: int) -> None:
        self.keys = [(token, k) for k in sorted(indices)]
        self.m = m

    def run(self, request: tuple) -> Any:
        """The request answered over this worker's cached partitions, as ``_polish_group``."""
        _use_worker_threads()
        request = _aligned_request(request)
        results = []
        for key in self.keys:
            part = _WORKER_CACHE.get(key)
            if part is not None:
                results.append(_answer(part, request))
        return _combine(results, request, self.m)


def combine_line(results: list) -> dict:
    """Several partitions' (or workers') parts of the line search as one, in the order given:
    phi'(0)'s sums and the flips added, each output's piece changes put together, complete up
    to the smallest step any part is complete to."""
    if len(results) == 1:
        return results[0]
    out = {key: sum(r[key] for r in results) for key in ("a", "b", "flips")}
    out["complete_to"] = np.minimum.reduce([r["complete_to"] for r in results])
    for key in ("t", "da", "db"):
        out[key] = [np.concatenate(parts) for parts in zip(*(r[key] for r in results))]
    return out


def combine_sums(results: list, m: int) -> Any:
    """Several partitions' sums as one, in the order given: scalars and vectors added; each
    output's change of M as one factor (the changed rows of all) while that has fewer values
    than the packed triangle, else as the packed triangle of their sum."""
    from budgetsvm import _budgetsvm

    if not results:
        return None
    if len(results) == 1:
        return results[0]
    losses = ("loss_counted", "loss_trial", "slope", "flips")
    if "sw" not in results[0]:  # without the changes of the Newton system
        return {key: sum(r[key] for r in results) for key in losses}
    out = {key: sum(r[key] for r in results) for key in (*losses, "s", "u", "sw", "swy")}
    grams, factors = [], []
    upper = np.triu_indices(m)
    for k in range(len(out["sw"])):
        parts_f = [r["factor"][k] for r in results]
        if all(f is not None for f in parts_f) and 2 * sum(len(f[0]) for f in parts_f) < m + 1:
            factors.append(
                (np.concatenate([f[0] for f in parts_f]), np.vstack([f[1] for f in parts_f]))
            )
            grams.append(None)
            continue
        gram = np.zeros((m, m))
        for r in results:
            if r["gram"][k] is not None:
                _budgetsvm.add_gram_change(gram, packed=_aligned(r["gram"][k]))
            elif r["factor"][k] is not None:
                weights, rows = r["factor"][k]
                _budgetsvm.add_gram_change(gram, weights=_aligned(weights), rows=_aligned(rows))
        grams.append(np.ascontiguousarray(gram[upper]))
        factors.append(None)
    out["gram"], out["factor"] = grams, factors
    return out
