"""Training across the cluster (``budgetsvm.dask.fit``): the collections' blocks held by the
workers, the first map's facts (rows, labels, moments), the kernel width and the classes or the
targets' median; then the basis (``_basis``, per class pair in ``_pairs``) and the polish
(``_polish``)."""

from __future__ import annotations

from typing import Any

import dask.array as da
import dask.dataframe as dd
import numpy as np

from budgetsvm import _one_vs_one
from budgetsvm._dask_tasks import _block_facts, _fit_partition
from budgetsvm._validation import fit_guard
from budgetsvm.dask._basis import _pooled_basis, _relay
from budgetsvm.dask._chunks import _check_dataframe_target, _rows_only
from budgetsvm.dask._pairs import _fit_pairs_on_parts
from budgetsvm.dask._polish import polish


def _collections(X: Any, y: Any, sample_weight: Any) -> tuple:
    """(X, y, weights) as dask arrays chunked alike along rows (weights None), and the
    dataframe's column names (None for arrays)."""
    columns = None
    if isinstance(X, dd.DataFrame):
        _check_dataframe_target(X, y)
        columns = list(X.columns)
        import warnings

        with warnings.catch_warnings():
            # String labels become an object array, which is what the labels need.
            warnings.filterwarnings("ignore", "Dask currently has limited support", UserWarning)
            X = X.to_dask_array(lengths=True)
            y = y.to_dask_array(lengths=True)
            if sample_weight is not None:
                if not isinstance(sample_weight, (dd.Series, dd.DataFrame)):
                    raise TypeError("with a dask dataframe X, sample_weight must be a dask Series")
                sample_weight = sample_weight.to_dask_array(lengths=True)
    elif not isinstance(X, da.Array):
        raise TypeError(f"X must be a dask array or dask dataframe, got {type(X).__name__}")
    elif not isinstance(y, da.Array) or y.ndim != 1:
        raise TypeError("with a dask array X, y must be a 1-D dask array")
    X = _rows_only(X)
    if np.isnan(X.shape[0]) or X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    y = y.rechunk((X.chunks[0],))
    if sample_weight is not None:
        if not isinstance(sample_weight, da.Array) or sample_weight.ndim != 1:
            raise TypeError("sample_weight must be a 1-D dask array (or Series) like y")
        if sample_weight.shape[0] != X.shape[0]:
            raise ValueError(
                f"sample_weight has {sample_weight.shape[0]} values for {X.shape[0]} rows"
            )
        sample_weight = sample_weight.rechunk((X.chunks[0],))
    return X, y, sample_weight, columns


def fit(clf: Any, X: Any, y: Any, sample_weight: Any = None) -> Any:
    """Train a ``BudgetSVC`` or a ``BudgetSVR`` across the cluster of the current
    ``dask.distributed`` client.

    1. Every partition (row block) runs the estimator's budgeted pass (``solver``, ``budget``,
       ``epochs``, merging...) on its own rows, in parallel on the workers that hold them, with
       the estimator's C (and ``lam``), a seed derived from ``random_state`` and the partition's
       index. Several classes share the budget (``multiclass='shared'``: one run per
       partition) or, where ``multiclass`` resolves to one-vs-one as in ``BudgetSVC.fit``
       ('auto': 500 support vectors per class pair), train one binary model per class pair on
       the rows of its two classes: each partition filters its rows by class on its worker,
       the budget is split over the pairs by their rows as ``fit`` splits it, every pair's
       partitions run at once, and each pair goes through steps 2 and 3 with its own budget,
       seed (``_one_vs_one.pair_seed``) and rows, the pairs polished one after another. Pair
       p is then what this function gives a binary BudgetSVC of that budget and seed on the
       pair's rows, partitioned alike; the model has ``fit``'s one-vs-one layout
       (``n_support_per_pair_``, ``fit_stats_['pairs']``, each pair's basis figures under its
       "dask"). A class whose rows all weigh 0 is then an error (it has no pairs to train).
    2. The partitions' support vectors are pooled, each model weighted by its share of the rows
       (the average of the partitions' decision functions), and the pool is reduced to
       ``budget`` by the estimator's budget maintenance (merging by weight degradation; with
       ``maintenance='project'``, merging), in partition order.
    3. With ``polish=True`` the coefficients and intercepts are solved exactly over all rows:
       Newton iterations (two rounds each, mostly: the exact line search's, as ``fit``'s polish
       takes it, from the partitions' piece changes along the direction, then the iteration's
       sums at the step found) whose sums over rows are maps over
       the partitions, each partition's K(X_p, S) computed once and kept on its worker (within
       ``polish_cache_size`` MB per partition), reduced on this process in partition order.
       Below 1,000 support vectors the direction is the Newton point of the B x B system those
       sums form here; from 1,000 on it is Hessian-free, as ``fit``'s polish: conjugate
       gradients run here, each product one round in which the workers multiply by their
       kernel values (B + 1 numbers per output and worker travel, and no B x B matrix beyond
       K_SS and the preconditioner's factors is formed). ``fit_stats_['polish']`` says which
       (``hessian_free``, ``cg_products``).

    The result depends on the partitioning and the seed, not on the number of workers; it is a
    plain fitted ``BudgetSVC`` (it pickles, saves to a model file and predicts without a
    cluster). ``fit_stats_['dask']`` reports the partitions, how the basis was made
    (``basis``: 'pool' as above, 'relay' below) with the pooled support vectors, the rounds and
    bytes moved and the time of each stage. A ``BudgetSVR`` is trained on targets centred by
    their weighted mean over all partitions (one extra sum in the first map). With BSCA (its
    default) and no averaging its basis comes instead from one BSCA run relayed through the
    partitions: ``epochs`` passes, each partition's leg continuing the model the one before
    left, with its rows' dual variables kept on its worker between passes; only the model (B
    support vectors) travels, and the legs run one after another (the budgeted pass is the
    cheap part; the polish is parallel). The same dual as ``BudgetSVR.fit`` over every row, so
    the same basis quality: separate partition models merged into B lost R^2 on Friedman #1
    (docs/dask_scaling.md). Otherwise (BSGD, averaging) the pool, with
    opposite-sign merges in the reduction.

    Parameters
    ----------
    clf : BudgetSVC or BudgetSVR
        The estimator, with its parameters (not with ``probability=True``: its
        cross-validation needs the rows in one process).
    X : dask.array.Array or dask.dataframe.DataFrame
        Training rows (dense), in row blocks.
    y : dask.array.Array or dask.dataframe.Series
        Labels (real targets for a ``BudgetSVR``), chunked or partitioned like X.
    sample_weight : dask.array.Array or dask.dataframe.Series, default=None
        Multiplies C for each row, as in ``fit``; rows of weight 0 are left out.

    Returns
    -------
    clf : BudgetSVC or BudgetSVR
        Fitted.
    """
    import time

    from distributed import default_client

    from budgetsvm.budget_svc import BudgetSVC
    from budgetsvm.budget_svr import BudgetSVR

    if not isinstance(clf, (BudgetSVC, BudgetSVR)):
        raise TypeError(
            f"budgetsvm.dask.fit trains a BudgetSVC or a BudgetSVR, not {type(clf).__name__}"
        )
    clf._check_params()
    if isinstance(clf.budget, str):
        raise ValueError(
            "budget='auto' chooses the budget by fitting on rows in memory (BudgetSVC.fit); "
            "budgetsvm.dask.fit needs an integer budget"
        )
    if getattr(clf, "probability", False):
        raise ValueError(
            "probability=True needs its cross-validation on rows in one process; fit with "
            "probability=False on the cluster"
        )
    try:
        client = default_client()
    except ValueError:
        raise ValueError(
            "budgetsvm.dask.fit needs a dask.distributed Client (e.g. Client(LocalCluster()))"
        ) from None
    start = time.perf_counter()
    X, y, sample_weight, columns = _collections(X, y, sample_weight)
    xs = list(X.to_delayed()[:, 0])
    ys = list(y.to_delayed())
    ws = list(sample_weight.to_delayed()) if sample_weight is not None else [None] * len(xs)
    # The blocks computed once and held by the workers for every stage.
    x_parts = client.compute(xs)
    y_parts = client.compute(ys)
    w_parts = client.compute(ws) if sample_weight is not None else [None] * len(xs)
    try:
        return _fit_on_parts(clf, client, x_parts, y_parts, w_parts, columns, start)
    except BaseException as e:
        from distributed.scheduler import KilledWorker

        if isinstance(e, KilledWorker):
            raise RuntimeError(
                f"a Dask worker died while training ({e}); the cluster lost the task more "
                "often than distributed's allowed-failures setting allows"
            ) from e
        raise
    finally:
        # The blocks are released with their futures (cancelling them could race with other
        # computations of the same collection).
        del x_parts, y_parts, w_parts


@fit_guard
def _fit_on_parts(clf, client, x_parts, y_parts, w_parts, columns, start):
    """The stages of ``fit`` (a failed or interrupted fit leaves the estimator as it was)."""
    import time

    regression = clf._epsilon() is not None
    facts = client.gather(
        client.map(
            _block_facts, x_parts, y_parts, w_parts, [regression] * len(x_parts), pure=False
        )
    )
    n_rows = int(sum(f["rows"] for f in facts))
    if n_rows == 0:
        raise ValueError("the collection holds no rows")
    width = max(f["width"] for f in facts)
    if width == 0:
        raise ValueError("X has no features (0 columns)")
    offset = 0.0
    if regression:
        total_w = sum(f["sum_w"] for f in facts)
        if total_w == 0:
            raise ValueError(
                "sample_weight is zero for every row: at least one row needs a non-zero weight"
            )
        # The targets' weighted median, as BudgetSVR.fit centres them.
        offset = _target_median(client, y_parts, w_parts, total_w)
        targets: dict = dict(epsilon=float(clf.epsilon))
    else:
        targets = _class_targets(clf, facts)
    if isinstance(clf.gamma, str) and clf.gamma == "scale":
        total, total_sq = sum(f["sum"] for f in facts), sum(f["sum_sq"] for f in facts)
        count = float(n_rows) * width
        var = total_sq / count - (total / count) ** 2
        gamma = 1.0 / (width * var) if var > 0 else 1.0
    elif isinstance(clf.gamma, str) and clf.gamma == "auto":
        gamma = 1.0 / width
    else:
        gamma = float(clf.gamma)
    seed = clf._seed()
    params = dict(
        C=float(clf.C),
        lam=None if clf.lam is None else float(clf.lam),
        gamma=gamma,
        budget=int(clf.budget),
        epochs=int(clf.epochs),
        maintenance="merge" if clf.maintenance == "project" else clf.maintenance,
        merge=clf.merge,
        shuffle=bool(clf.shuffle),
        solver=clf.solver,
        dual_step=clf.dual_step,
        average=bool(clf.average),
        n_rows=n_rows,
        offset=offset,
    )
    setup_seconds = time.perf_counter() - start
    if not regression and _one_vs_one.one_vs_one_for(
        clf.multiclass, int(clf.budget), len(targets["classes"])
    ):
        _set_data_attributes(clf, gamma, width, columns)
        return _fit_pairs_on_parts(
            clf, client, (x_parts, y_parts, w_parts), facts, targets, params, seed, start,
            setup_seconds,
        )
    t0 = time.perf_counter()
    seeds = [(seed + 7919 * k) % (2**31 - 1) for k in range(len(x_parts))]
    if regression and clf.solver == "bsca" and not clf.average:
        sv, coef, used = _relay(client, x_parts, y_parts, w_parts, facts, params, seeds, targets)
        basis = dict(basis="relay")
    else:
        models = client.gather(
            [
                client.submit(_fit_partition, xp, yp, wp, params, sd, targets, pure=False)
                for xp, yp, wp, sd in zip(x_parts, y_parts, w_parts, seeds)
            ]
        )
        sv, coef, used, basis = _pooled_basis(
            models, int(clf.budget), gamma, params, clf.merge, regression
        )
    basis_seconds = time.perf_counter() - t0
    if regression:
        clf._y_offset = offset
    else:
        clf.classes_ = targets["classes"]
        clf.class_weight_ = targets["class_w"]
    _set_data_attributes(clf, gamma, width, columns)
    C = float(clf.C) if clf.lam is None else 1.0 / (used * float(clf.lam))
    clf.lambda_ = 1.0 / (used * C) if clf.lam is None else float(clf.lam)
    clf.support_vectors_ = np.asarray(sv)
    clf.dual_coef_ = np.ascontiguousarray(np.asarray(coef).T)
    clf.intercept_ = np.full(clf.dual_coef_.shape[0], offset)
    clf.n_iter_ = int(clf.epochs)
    clf.budget_ = int(clf.budget)
    clf.history_ = None
    clf._stream = None
    if not regression:
        # One relay of budgeted runs: the shared budget's model, whatever an earlier fit was.
        clf.multiclass_ = "binary" if len(clf.classes_) == 2 else "shared"
        clf.n_support_per_pair_ = None
        clf._pair_streams = None
    stats = dict(
        partitions=len(x_parts),
        **basis,
        setup_seconds=setup_seconds,
        basis_seconds=basis_seconds,
        rows=int(used),
    )
    clf.fit_stats_ = {"dask": stats, "iterations": int(clf.epochs) * int(used)}
    if clf.polish:
        t0 = time.perf_counter()
        polish_stats = polish(clf, client, x_parts, y_parts, w_parts, targets, C)
        stats["polish_seconds"] = time.perf_counter() - t0
        clf.fit_stats_["polish"] = polish_stats
    stats["seconds"] = time.perf_counter() - start
    clf.fit_stats_["seconds"] = stats["seconds"]
    return clf


def _set_data_attributes(clf: Any, gamma: float, width: int, columns: Any) -> None:
    """What the data set of a fit: the kernel width, the features and their names."""
    clf.gamma_ = gamma
    clf.n_features_in_ = int(width)
    if columns is not None and all(isinstance(c, str) for c in columns):
        clf.feature_names_in_ = np.asarray(columns, dtype=object)
    elif hasattr(clf, "feature_names_in_"):
        del clf.feature_names_in_


def _target_median(client: Any, y_parts: list, w_parts: list, total_w: float) -> float:
    """The lower weighted median of the targets over the partitions (``target_offset`` of
    them all), exactly, in three maps over the targets (``_dask_tasks``)."""
    from budgetsvm._dask_tasks import _target_thresholds, _targets_in, _weight_at_or_below

    thresholds = np.unique(
        np.concatenate(client.gather(client.map(_target_thresholds, y_parts, w_parts)))
    )
    below = sum(
        client.gather(
            client.map(_weight_at_or_below, y_parts, w_parts, thresholds=thresholds, pure=False)
        )
    )
    # The median is the first value whose weight at or below reaches half: in (low, high].
    k = int(np.searchsorted(below, 0.5 * total_w, side="left"))
    low, high = (thresholds[k - 1], thresholds[k]) if k > 0 else (-np.inf, thresholds[0])
    base = below[k - 1] if k > 0 else 0.0
    parts = client.gather(client.map(_targets_in, y_parts, w_parts, low=low, high=high))
    values = np.concatenate([v for v, _ in parts])
    weights = np.concatenate([w for _, w in parts])
    order = np.argsort(values, kind="stable")
    cumulative = base + np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, 0.5 * total_w, side="left")])


def _class_targets(clf: Any, facts: list) -> dict:
    """The classes of the blocks' labels and their weights (``class_weight``)."""
    from sklearn.utils.multiclass import check_classification_targets

    from budgetsvm._validation import class_weights

    labels = np.concatenate([f["labels"] for f in facts if len(f["labels"])])
    classes = np.unique(labels)
    counts = np.zeros(len(classes))
    for f in facts:
        if len(f["labels"]):
            counts[np.searchsorted(classes, f["labels"])] += f["counts"]
    if len(classes) < 2:
        raise ValueError(
            f"BudgetSVC needs samples of at least two classes; the data contain only one class: "
            f"{classes[0]!r}"
        )
    check_classification_targets(classes)
    class_w = class_weights(clf.class_weight, classes, np.arange(len(classes)), counts)
    return dict(classes=classes, class_w=class_w)
