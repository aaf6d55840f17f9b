"""The distributed polish of ``budgetsvm.dask.fit`` (``budgeted::polish``'s Newton iterations,
the sums over rows mapped over the partitions): the line search, the Hessian-free direction
(the engine's conjugate gradients, each product a round on the workers) and the rounds."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from budgetsvm._dask_tasks import PolishActor, _forget, _polish_group

# Called as _AFTER_ROUND(round, client) before every polish round (tests kill a worker there).
_AFTER_ROUND: Any = None

# The piece changes a partition sends in a line search's first round (the smallest, 24 bytes
# each; twice as many each further round): mostly enough to reach the step in one round.
_FIRST_CHANGES = 4096

# From this many support vectors the distributed polish is Hessian-free, as the serial one
# (None: the serial solve's ``HESSIAN_FREE_BASIS``; tests lower it).
_HESSIAN_FREE_FROM: Optional[int] = None


def polish(clf, client, x_parts, y_parts, w_parts, targets, C) -> dict:
    """``_distributed_polish`` of ``clf`` over the partitions under a fresh token, the workers'
    kernel values of it dropped afterwards (whether it finished or not); returns its figures."""
    import uuid

    token = uuid.uuid4().hex
    try:
        return _distributed_polish(clf, client, x_parts, y_parts, w_parts, targets, C, token)
    finally:
        _forget_everywhere(client, token)


def _forget_everywhere(client: Any, token: str) -> None:
    """The workers' kernel values of the polish ``token`` are dropped; nothing waits for it."""
    from distributed import fire_and_forget

    for address in client.scheduler_info()["workers"]:
        fire_and_forget(
            client.submit(_forget, token, workers=[address], allow_other_workers=False, pure=False)
        )


def _line_steps(round_trip, kss, coef, b, direction, db, C, live, exact_step):
    """The exact line search's steps along (direction, db) for the live outputs (the serial
    solve's ``line_search``, distributed): a round for phi'(0)'s sums, the rows changing piece
    within the full step and every partition's smallest piece changes; the driver walks
    them in order (``polish_line_walk``) up to where every partition's are complete, and asks
    for the next ones from there (twice as many) while the root lies beyond. ``exact_step``:
    the directions are the Newton system's. A step of 0: no descent left."""
    from budgetsvm import _budgetsvm
    from budgetsvm._dask_tasks import combine_line
    from budgetsvm._validation import _aligned

    q = coef.shape[1]
    t = np.zeros(q)
    start = np.where(live, 0.0, np.inf)
    most = _FIRST_CHANGES
    walks: dict = {}
    while np.isfinite(start).any():
        line = combine_line(
            round_trip(("line", (coef, b), (direction, db), C, start, most))
        )
        for k in np.flatnonzero(np.isfinite(start)):
            if k not in walks:
                a = coef[:, k] @ kss @ direction[:, k] + line["a"][k]
                curvature = direction[:, k] @ kss @ direction[:, k] + line["b"][k]
                walks[k] = (float(a), float(curvature), 0.0)
                settled = _budgetsvm.polish_settled_step(
                    float(a), float(curvature), bool(line["flips"][k] > 0), exact_step
                )
                if settled is not None:
                    t[k], start[k] = settled, np.inf
                    continue
            complete_to = float(line["complete_to"][k])
            step, walks[k] = _budgetsvm.polish_line_walk(
                walks[k], *(_aligned(line[key][k]) for key in ("t", "da", "db")), complete_to
            )
            if step is None:
                start[k] = complete_to
            else:
                t[k], start[k] = step, np.inf
        most *= 2
    return t


def _nbytes(value: Any) -> int:
    """Bytes of the arrays in a (nested) result."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def _hessian_free_directions(round_trip, pre, kss, coef, b, live, C, first_norm):
    """The Hessian-free direction at (coef, b) for the live outputs (``budgeted::polish``'s,
    distributed): one round for the gradient and the squared rows' weight, then the serial
    solve's preconditioned conjugate gradients on H x = -g (``PolishPreconditioner.solve``, in
    the engine), each product a round (the workers' sums over the rows squared at the point;
    K_SS's part here). Returns (direction m x q, db, -g.x per output, products)."""
    from budgetsvm import _budgetsvm

    m, q = coef.shape
    ridge = pre.ridge
    # The serial solve's conjugate gradients: at most this many products per direction, the
    # preconditioner refactored when the squared rows' weight moves by more than this factor,
    # the relative residual sqrt(|g| / |g_first|) within these bounds.
    max_products = _budgetsvm.POLISH_MAX_CG_PRODUCTS
    rescale_factor = _budgetsvm.POLISH_RESCALE_FACTOR
    lo, hi = _budgetsvm.POLISH_CG_TOL
    parts = round_trip(("gradient", (coef, b)))
    grad = sum(p["gradient"] for p in parts)
    weight = sum(p["weight"] for p in parts)
    live = [int(k) for k in live]
    a = 2 * C * float(np.mean(weight[live])) / m
    a0 = pre.scale
    if not (a0 / rescale_factor < a < rescale_factor * a0):  # NaN before the first
        if not pre.rescale(a):
            raise ValueError("the polish's preconditioner could not be factorised")
    g = np.zeros((q, m + 1))
    for k in live:
        g[k, :m] = kss @ coef[:, k] + 2 * C * grad[k, :m]
        g[k, m] = 2 * C * grad[k, m]
    rhs = -g
    # No squared row: the objective is linear in b (no curvature, nothing couples it to the
    # coefficients), so b stays, as in the serial solve; left in, the intercept's part of the
    # direction grows without bound.
    rhs[np.abs(weight) <= _budgetsvm.POLISH_NO_CURVATURE, m] = 0.0
    rel_tols = np.zeros(q)
    for k in live:
        norm = float(np.linalg.norm(g[k]))
        if first_norm[k] == 0.0:
            first_norm[k] = norm
        rel_tols[k] = min(max(np.sqrt(norm / max(first_norm[k], np.finfo(float).tiny)), lo), hi)

    def product(v, running):
        v = np.where(running[:, None], v, 0.0)
        hv = 2 * C * sum(round_trip(("hv", (coef, b), v)))
        hv[:, :m] += v[:, :m] @ kss + ridge * v[:, :m]
        return hv

    x, products = pre.solve(
        np.ascontiguousarray(rhs), 2 * C * weight, rel_tols, max_products, product
    )
    most = np.array([-float(g[k] @ x[k]) for k in range(q)])
    return np.ascontiguousarray(x[:, :m].T), x[:, m].copy(), most, products


def _distributed_polish(clf, client, x_parts, y_parts, w_parts, targets, C, token):
    """Newton iterations of the polish (``budgeted::polish``), the sums over rows mapped over
    the partitions and added here in partition order; the direction the Newton point of the
    system those sums form (below ``_HESSIAN_FREE_FROM`` support vectors) or Hessian-free
    (``_hessian_free_directions``: no m x m system beyond K_SS and the preconditioner's
    factors); the step from the exact line search (``_line_steps``), per output, from the
    model's coefficients and intercepts. Sets ``dual_coef_`` and ``intercept_``."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from budgetsvm import _budgetsvm
    from budgetsvm._validation import _aligned

    S = np.ascontiguousarray(clf.support_vectors_)
    m = S.shape[0]
    q = clf.dual_coef_.shape[0]
    kss = _budgetsvm.rbf_kernel(S, S, clf.gamma_)
    round_trip = _Rounds(client, token, clf, targets, (x_parts, y_parts, w_parts))

    def regulariser(coef_t, k):
        beta = coef_t[:, k]
        return 0.5 * beta @ kss @ beta

    coef = np.ascontiguousarray(clf.dual_coef_.T)  # m x q
    b = np.array(clf.intercept_, dtype=np.float64)
    from_m = _budgetsvm.HESSIAN_FREE_BASIS if _HESSIAN_FREE_FROM is None else _HESSIAN_FREE_FROM
    hessian_free = m >= from_m
    if hessian_free:
        pre = _budgetsvm.PolishPreconditioner(kss)
        first_norm = np.zeros(q)
        cg_products = 0
    # The Newton system's sums (the Hessian-free direction keeps none).
    shape = (0, 0) if hessian_free else (m, m)
    gram = np.zeros((q, *shape))
    s = np.zeros((q, m))
    u = np.zeros((q, m))
    sw = np.zeros(q)
    swy = np.zeros(q)

    def add(parts, k):
        for p in parts:
            # Arrays off the network may be misaligned: aligned copies where needed.
            if p["gram"][k] is not None:
                _budgetsvm.add_gram_change(gram[k], packed=_aligned(p["gram"][k]))
            elif p["factor"][k] is not None:
                weights, rows = p["factor"][k]
                _budgetsvm.add_gram_change(gram[k], weights=_aligned(weights), rows=_aligned(rows))
            s[k] += p["s"][k]
            u[k] += p["u"][k]
            sw[k] += p["sw"][k]
            swy[k] += p["swy"][k]

    first = round_trip(("sums", (coef, b), None, not hessian_free))
    if hessian_free and not round_trip.actors:
        # Some partition's kernel values exceed polish_cache_size and are computed again in
        # every round: each conjugate-gradient product would compute them, so the Newton
        # system's few rounds instead (its first sums again, with the system's changes).
        hessian_free = False
        gram = np.zeros((q, m, m))
        first = round_trip(("sums", (coef, b), None, True))
    obj = np.array(
        [regulariser(coef, k) + C * sum(p["loss_trial"][k] for p in first) for k in range(q)]
    )
    if not hessian_free:
        for k in range(q):
            add(first, k)
    start_obj = obj.copy()
    done = np.zeros(q, dtype=bool)
    decrease_before = np.zeros(q)
    iterations = 0
    tol = float(clf.polish_tol)
    full_steps = False
    while not done.all() and iterations < int(clf.polish_max_iter):
        iterations += 1
        direction = np.zeros((m, q))
        db = np.zeros(q)
        if hessian_free:
            direction, db, most, products = _hessian_free_directions(
                round_trip, pre, kss, coef, b, np.flatnonzero(~done), C, first_norm
            )
            cg_products += products
            # The objective is convex: no step t <= 1 lowers it by more than -g.x, so below
            # the tolerance the point is the answer (the serial solve's test).
            for k in np.flatnonzero(~done):
                if not most[k] > tol * abs(obj[k]):
                    done[k] = True
                    direction[:, k] = 0.0
                    db[k] = 0.0
            if done.all():
                break
        else:
            for k in np.flatnonzero(~done):
                x = _budgetsvm.polish_newton_point(
                    kss, gram[k], s[k], u[k], float(sw[k]), float(swy[k]), C, float(b[k])
                )
                direction[:, k] = x[:m] - coef[:, k]
                db[k] = x[m] - b[k]
        # Early on, the exact line search (a round or a few); once the steps settle near the
        # full Newton step (it converges quadratically there), the full step is tried at once
        # and kept when it lowers each objective enough (Armijo), saving a round per iteration.
        if full_steps:
            t = np.where(done, 0.0, 1.0)
        else:
            t = _line_steps(
                round_trip, kss, coef, b, direction, db, C, ~done, not hessian_free
            )
            done |= ~done & (t == 0.0)  # no descent left: converged to rounding
        live = ~done
        if not live.any():
            break
        trial_c = np.ascontiguousarray(coef + direction * (t * live))
        trial_b = b + db * t * live
        parts = round_trip(("sums", (trial_c, trial_b), (coef, b), not hessian_free))
        new_obj = np.array(
            [regulariser(trial_c, k) + C * sum(p["loss_trial"][k] for p in parts) for k in range(q)]
        )
        if full_steps:
            step_slope = np.array(
                [
                    coef[:, k] @ kss @ (trial_c[:, k] - coef[:, k])
                    - 2 * C * sum(p["slope"][k] for p in parts)
                    for k in range(q)
                ]
            )
            if np.any(new_obj[live] > obj[live] + 1e-4 * step_slope[live]):
                # Not enough decrease: back to the line search (this iteration again).
                full_steps = False
                iterations -= 1
                continue
        for k in np.flatnonzero(live):
            if not hessian_free:
                add(parts, k)
            changed = sum(int(p["flips"][k]) for p in parts)
            decrease = obj[k] - new_obj[k]
            coef[:, k] = trial_c[:, k]
            b[k] = trial_b[k]
            obj[k] = new_obj[k]
            # A full Newton step that changed no row's activity reached the optimum; the rest
            # is the serial solve's rule (`stops_after`: Hessian-free, a full step's decrease
            # squared over the one before predicts the next).
            enough = tol * abs(new_obj[k])
            predicted = hessian_free and t[k] == 1.0 and 0.0 < decrease < decrease_before[k]
            if (
                (t[k] == 1.0 and changed == 0)
                or decrease <= enough
                or (predicted and decrease * (decrease / decrease_before[k]) <= enough)
            ):
                done[k] = True
            decrease_before[k] = decrease
        if not full_steps and np.all(np.abs(t[live] - 1.0) <= 0.25):
            full_steps = True
    converged = bool(done.all())
    clf.dual_coef_ = np.ascontiguousarray(coef.T)
    clf.intercept_ = b
    stats = dict(
        objective_start=start_obj.tolist(),
        objective=obj.tolist(),
        iterations=iterations,
        converged=converged,
        rounds=round_trip.rounds,
        bytes_moved=int(round_trip.bytes),
        hessian_free=hessian_free,
    )
    if hessian_free:
        stats["cg_products"] = int(cg_products)
    if not converged:
        warnings.warn(
            f"the polish stopped after polish_max_iter={clf.polish_max_iter} Newton iterations "
            "before converging; the model is kept (raise polish_max_iter)",
            ConvergenceWarning,
            stacklevel=4,
        )
    return stats


class _Rounds:
    """The polish's rounds: a request answered by every worker over the partitions it holds,
    their results in the order of their first partitions (``round_trip(request)``); the
    rounds and bytes moved counted. What every round needs and never changes is sent once;
    once every partition's kernel values stay on the worker that computed them, later rounds
    call actors there directly, without the scheduler."""

    def __init__(self, client, token, clf, targets, parts):
        self.client = client
        self.token = token
        self.m = clf.support_vectors_.shape[0]
        self.x_parts, self.y_parts, self.w_parts = parts
        self.rounds = 0
        self.bytes = 0
        self.actors: list = []
        # (One object under a fresh key: a dict given to scatter would be scattered under its
        # own keys, "basis", "targets", ..., which the next polish, e.g. one-vs-one's next
        # pair, would reuse while the cluster releases this one's.)
        [self.context] = client.scatter(
            [
                dict(
                    token=token,
                    basis=np.ascontiguousarray(clf.support_vectors_),
                    gamma=clf.gamma_,
                    targets=targets,
                    cache_bytes=float(clf.polish_cache_size) * 1024 * 1024,
                )
            ],
            broadcast=True,
            hash=False,
        )
        # One task per worker and round, over the partitions it holds (placement read once; a
        # partition that moves, e.g. after a worker died, is found by the scheduler anyway).
        holders = client.who_has(self.x_parts)
        groups: dict = {}
        for k, xp in enumerate(self.x_parts):
            # A partition held by several workers (copied for an earlier task) goes to the one
            # with the fewest so far: the rounds wait for the busiest worker.
            where = sorted(
                holders.get(xp.key) or ("",), key=lambda a: (len(groups.get(a, [])), a)
            )
            groups.setdefault(where[0], []).append(k)
        self.groups = dict(sorted(groups.items(), key=lambda item: item[1][0]))

    def __call__(self, request):
        self.rounds += 1
        if _AFTER_ROUND is not None:  # tests: kill a worker between rounds
            _AFTER_ROUND(self.rounds, self.client)
        if self.actors:
            try:
                calls = [a.run(request) for a in self.actors]
                results = [c.result() for c in calls]
            except Exception as e:
                raise RuntimeError(
                    "a Dask worker holding a part of the polish was lost (or failed) during "
                    f"budgetsvm.dask.fit: {type(e).__name__}: {e}; the fit stopped, the "
                    "estimator is unchanged; fit again"
                ) from e
        else:
            results = self._by_tasks(request)
        results = [r for r in results if r is not None]
        self.bytes += sum(_nbytes(r) for r in results)
        return results

    def _by_tasks(self, request):
        """A round as one task per worker (the first rounds, or while some partition's kernel
        values are computed again every round); the actors made when none is."""
        client = self.client
        futures = [
            client.submit(
                _polish_group,
                self.context,
                [(k, self.x_parts[k], self.y_parts[k], self.w_parts[k]) for k in ks],
                request,
                workers=[address] if address else None,
                allow_other_workers=True,
                pure=False,
            )
            for address, ks in self.groups.items()
        ]
        done = client.gather(futures)
        if all(r["cached"] and r["address"] for r in done):
            made = [
                client.submit(
                    PolishActor, self.token, r["indices"], self.m, actor=True,
                    workers=[r["address"]], allow_other_workers=False, pure=False,
                )
                for r in done
            ]
            self.actors.extend(f.result() for f in made)
        return [r["result"] for r in done]
