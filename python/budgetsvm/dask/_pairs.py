"""``budgetsvm.dask.fit`` one-vs-one: every class pair a binary fit across the cluster on the
rows of its two classes."""

from __future__ import annotations

import numpy as np

from budgetsvm import _one_vs_one
from budgetsvm._dask_tasks import _fit_partition
from budgetsvm.dask._basis import _pooled_basis
from budgetsvm.dask._polish import polish


def _fit_pairs_on_parts(clf, client, parts, facts, targets, params, seed, start, setup_seconds):
    """``fit`` one-vs-one (``BudgetSVC``, ``multiclass`` resolving to it as in ``BudgetSVC.fit``):
    every class pair (a, b) trained as a binary ``fit`` on the rows of its two classes, each
    partition's rows filtered by class on the worker that holds them (nothing is copied to
    make the pairs' collections). The budget is split over the pairs by their rows of
    positive weight (counted in the first map), as ``BudgetSVC.fit`` splits it; every pair's
    partitions run their budgeted passes at once (one task per pair and partition), each
    pair's pool is reduced to its budget here, then the pairs are polished one after another,
    each a distributed polish over its rows (its kernel values kept on the workers during its
    rounds, dropped after). Pair p's seed is ``_one_vs_one.pair_seed(seed, p)``, so pair p is
    the model ``fit`` gives a binary BudgetSVC with that ``random_state`` and the pair's
    budget on the pair's rows, partitioned alike. Sets the one-vs-one model of
    ``BudgetSVC.fit`` (``n_support_per_pair_``, ``fit_stats_['pairs']``)."""
    import time

    from sklearn.base import clone

    from budgetsvm._probability import class_pairs

    x_parts, y_parts, w_parts = parts
    classes, class_w = targets["classes"], targets["class_w"]
    pairs = class_pairs(len(classes))
    counts = np.zeros(len(classes))
    for f in facts:
        if len(f["labels"]):
            counts[np.searchsorted(classes, f["labels"])] += f["kept_counts"]
    empty = [c for c, n in zip(classes.tolist(), counts) if n == 0]
    if empty:
        # (BudgetSVC.fit leaves such a class out; the cluster's classes come from every label.)
        raise ValueError(
            f"class {empty[0]!r} has no rows of non-zero weight, so its class pairs have "
            "nothing to train on; leave its rows out of the data, or use multiclass='shared'"
        )
    pair_rows = [int(counts[a] + counts[b]) for a, b in pairs]
    budgets = _one_vs_one.pair_budgets(int(clf.budget), pair_rows)
    regression = False
    t0 = time.perf_counter()
    pair_targets = [dict(targets, pair=(int(a), int(b))) for a, b in pairs]
    futures = [
        [
            client.submit(
                _fit_partition, xp, yp, wp, dict(params, budget=int(budget)),
                (_one_vs_one.pair_seed(seed, p) + 7919 * k) % (2**31 - 1), pair_targets[p],
                pure=False,
            )
            for k, (xp, yp, wp) in enumerate(zip(x_parts, y_parts, w_parts))
        ]
        for p, budget in enumerate(budgets)
    ]
    models = client.gather(futures)
    bases = [
        _pooled_basis(m, budget, clf.gamma_, params, clf.merge, regression)
        for m, budget in zip(models, budgets)
    ]
    basis_seconds = time.perf_counter() - t0
    template = clone(clf).set_params(probability=False, class_weight=None)
    support_vectors, coefs, intercepts, stats = [], [], [], []
    polish_started = time.perf_counter()
    for p, ((a, b), budget, (sv, coef, used, basis)) in enumerate(zip(pairs, budgets, bases)):
        model = clone(template).set_params(budget=int(budget))
        model.classes_ = classes[[a, b]]
        model.class_weight_ = class_w[[a, b]]
        model.gamma_ = clf.gamma_
        model.support_vectors_ = np.asarray(sv)
        model.dual_coef_ = np.ascontiguousarray(np.asarray(coef).T)
        model.intercept_ = np.zeros(1)
        C = float(clf.C) if clf.lam is None else 1.0 / (used * float(clf.lam))
        pair = dict(
            classes=(int(a), int(b)),
            rows=int(used),
            budget=int(budget),
            lambda_=1.0 / (used * C) if clf.lam is None else float(clf.lam),
            iterations=int(clf.epochs) * int(used),
            epochs=int(clf.epochs),
            dask=basis,
        )
        if clf.polish:
            pair["polish"] = polish(
                model, client, x_parts, y_parts, w_parts, pair_targets[p], C
            )
        # The binary model is positive for its second class; a pair's value for its first.
        support_vectors.append(model.support_vectors_)
        coefs.append(-np.asarray(model.dual_coef_[0], dtype=np.float64))
        intercepts.append(-float(model.intercept_[0]))
        stats.append(pair)
    polish_seconds = time.perf_counter() - polish_started
    clf.classes_ = classes
    clf.class_weight_ = class_w
    n_rows = int(sum(f["rows"] for f in facts))
    clf.lambda_ = clf._lambda_for(n_rows)
    clf.n_iter_ = int(clf.epochs)
    clf.history_ = None
    clf._stream = None
    clf._pair_streams = None  # the pairs' runs stayed on the workers
    seconds = time.perf_counter() - start
    clf._set_pairs(support_vectors, coefs, intercepts, stats, seconds)
    clf.fit_stats_["dask"] = dict(
        partitions=len(x_parts),
        basis="pool",
        setup_seconds=setup_seconds,
        basis_seconds=basis_seconds,
        polish_seconds=polish_seconds if clf.polish else 0.0,
        rows=int(sum(pair_rows)),
        seconds=seconds,
    )
    return clf
