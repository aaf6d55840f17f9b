"""Probability estimates as LIBSVM makes them (``probability=True``): Platt's sigmoid fitted on
decision values from an internal cross-validation, and for several classes pairwise coupling.

Every estimator exposes pairwise decision values ``_pairwise_decision(X)``, one column per class
pair (a, b), a < b, in LIBSVM's order (0,1), (0,2), ..., (1,2), ..., positive for class a. For the
exact solver these are its one-vs-one machines; for the budgeted one-vs-rest and Crammer-Singer
models, the difference f_a - f_b of the class scores. Pair (a, b) gets its sigmoid
P(a | a or b, x) = 1 / (1 + exp(A d + B)) fitted on held-out values of the rows of a and b
(Lin, Lin & Weng 2007, the Newton method of LIBSVM's ``sigmoid_train``, with row weights); the
pairwise probabilities are coupled into one distribution by method 2 of Wu, Lin & Weng (2004),
solved exactly as the linear system of its optimality conditions rather than iterated.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from budgetsvm._docstrings import rows_doc
from budgetsvm._validation import fitted_snapshot

#: LIBSVM's clip of pairwise probabilities before coupling.
MIN_PROB = 1e-7
#: Rows per block of the batched coupling solve (bounds its memory to a few MB per class pair).
_COUPLING_BLOCK = 8192


def class_pairs(n_classes: int) -> list:
    return [(a, b) for a in range(n_classes) for b in range(a + 1, n_classes)]


def fit_sigmoid(
    dec: np.ndarray, positive: np.ndarray, weights: Optional[np.ndarray] = None
) -> Tuple[float, float]:
    """(A, B) of P(positive | d) = 1 / (1 + exp(A d + B)) by maximum likelihood with Platt's
    smoothed targets, as LIBSVM's ``sigmoid_train``; ``weights`` scale each row's term (and
    the class counts of the targets)."""
    dec = np.asarray(dec, dtype=np.float64)
    positive = np.asarray(positive, dtype=bool)
    w = np.ones_like(dec) if weights is None else np.asarray(weights, dtype=np.float64)
    prior1 = float(w[positive].sum())
    prior0 = float(w[~positive].sum())
    hi_target = (prior1 + 1.0) / (prior1 + 2.0)
    lo_target = 1.0 / (prior0 + 2.0)
    t = np.where(positive, hi_target, lo_target)
    max_iter, min_step, sigma, eps = 100, 1e-10, 1e-12, 1e-5

    def objective(a: float, b: float) -> float:
        f = dec * a + b
        # t f + log(1 + exp(-f)), written to never overflow.
        return float(np.sum(w * (t * f + np.logaddexp(0.0, -f))))

    a, b = 0.0, float(np.log((prior0 + 1.0) / (prior1 + 1.0)))
    fval = objective(a, b)
    for _ in range(max_iter):
        f = dec * a + b
        p = 0.5 * (1.0 + np.tanh(-0.5 * f))  # 1 / (1 + exp(f)), stable
        q = 1.0 - p
        d2 = w * p * q
        h11 = sigma + float(np.sum(dec * dec * d2))
        h22 = sigma + float(np.sum(d2))
        h21 = float(np.sum(dec * d2))
        d1 = w * (t - p)
        g1 = float(np.sum(dec * d1))
        g2 = float(np.sum(d1))
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        da = -(h22 * g1 - h21 * g2) / det
        db = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * da + g2 * db
        step = 1.0
        while step >= min_step:
            new_a, new_b = a + step * da, b + step * db
            new_f = objective(new_a, new_b)
            if new_f < fval + 1e-4 * step * gd:
                a, b, fval = new_a, new_b, new_f
                break
            step /= 2.0
        else:
            break  # the line search failed: as LIBSVM, keep the last point
    return a, b


def sigmoid_predict(dec: np.ndarray, a: float, b: float) -> np.ndarray:
    """1 / (1 + exp(a d + b)) without overflow."""
    return 0.5 * (1.0 + np.tanh(-0.5 * (dec * a + b)))


def couple(r: np.ndarray) -> np.ndarray:
    """Class probabilities from pairwise ones: ``r[n, i, j]`` = P(i | i or j) (r_ji = 1 - r_ij).
    Method 2 of Wu, Lin & Weng: min_p 1/2 p^T Q p s.t. sum(p) = 1 with Q_tt = sum_{j != t} r_jt^2,
    Q_tj = -r_jt r_tj, whose optimum is non-negative; solved from its KKT system."""
    n, k, _ = r.shape
    out = np.empty((n, k))
    for start in range(0, n, _COUPLING_BLOCK):
        rb = r[start : start + _COUPLING_BLOCK]
        m = len(rb)
        off = -np.swapaxes(rb, 1, 2) * rb  # -r_jt r_tj at [t, j]
        sq = np.swapaxes(rb, 1, 2) ** 2  # r_jt^2 at [t, j]
        eye = np.eye(k, dtype=bool)
        q = np.where(eye, 0.0, off)
        diag = np.where(eye, 0.0, sq).sum(axis=2)
        q[:, np.arange(k), np.arange(k)] = diag
        kkt = np.zeros((m, k + 1, k + 1))
        kkt[:, :k, :k] = q
        kkt[:, :k, k] = 1.0
        kkt[:, k, :k] = 1.0
        rhs = np.zeros((m, k + 1, 1))
        rhs[:, k, 0] = 1.0
        p = np.linalg.solve(kkt, rhs)[:, :k, 0]
        # Rounding can leave a tiny negative; the optimum itself is non-negative.
        p = np.maximum(p, 0.0)
        out[start : start + m] = p / p.sum(axis=1, keepdims=True)
    return out


def probabilities(pairwise: np.ndarray, prob_a: np.ndarray, prob_b: np.ndarray, k: int) -> np.ndarray:
    """predict_proba from pairwise decision values (n, k(k-1)/2) and the fitted sigmoids."""
    n = pairwise.shape[0]
    r_pair = np.clip(sigmoid_predict(pairwise, prob_a[None, :], prob_b[None, :]), MIN_PROB, 1 - MIN_PROB)
    if k == 2:
        return np.column_stack([r_pair[:, 0], 1.0 - r_pair[:, 0]])
    r = np.zeros((n, k, k))
    for col, (a, b) in enumerate(class_pairs(k)):
        r[:, a, b] = r_pair[:, col]
        r[:, b, a] = 1.0 - r_pair[:, col]
    return couple(r)


def stratified_folds(
    y_index: np.ndarray, n_folds: int, seed: int
) -> List[Tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices of ``n_folds`` folds that keep every class's share: each
    class's rows in a random order, dealt to the folds in turn, one class after the other. A
    fold's training rows then hold a class's rows in the proportion the whole set holds them
    (give or take one row), so a setting feasible on the whole set (a nu-SVC's nu) stays
    feasible on the folds wherever the counts allow, and no fold lacks a class the set has
    n_folds rows of. Unlike StratifiedKFold it accepts classes with fewer rows than folds."""
    rng = np.random.default_rng(seed)
    order = np.concatenate(
        [rng.permutation(np.flatnonzero(y_index == c)) for c in np.unique(y_index)]
    )
    fold_of = np.empty(len(y_index), dtype=np.intp)
    fold_of[order] = np.arange(len(order)) % n_folds
    return [(np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)) for f in range(n_folds)]


def fit_platt(
    fit_fold: Callable[[np.ndarray], Any],
    pairwise_of: Callable[[Any, np.ndarray, np.ndarray], np.ndarray],
    n_rows: int,
    y_index: np.ndarray,
    n_classes: int,
    weights: Optional[np.ndarray],
    seed: int,
) -> Tuple[np.ndarray, np.ndarray, float]:
    """(probA, probB, seconds) from a 5-fold cross-validation (fewer folds for fewer than 5
    rows; stratified, ``stratified_folds``), as LIBSVM's ``svm_binary_svc_probability`` per pair. ``fit_fold(train_rows)``
    returns an estimator fitted on those rows (or None when they hold a single class) with a
    ``classes_`` attribute of class indices; ``pairwise_of(estimator, train_rows, test_rows)``
    its pairwise decision values on the held-out rows. A pair whose classes a fold's training rows lack gets
    no held-out values from that fold."""
    start = time.perf_counter()
    pairs = class_pairs(n_classes)
    column = {pair: col for col, pair in enumerate(pairs)}
    dec = np.full((n_rows, len(pairs)), np.nan)
    for train, test in stratified_folds(y_index, min(5, n_rows), seed):
        fitted = fit_fold(train)
        if fitted is None:
            continue
        present = np.asarray(fitted.classes_)
        values = pairwise_of(fitted, train, test)
        for sub_col, (a, b) in enumerate(class_pairs(len(present))):
            dec[test, column[(int(present[a]), int(present[b]))]] = values[:, sub_col]
    prob_a = np.zeros(len(pairs))
    prob_b = np.zeros(len(pairs))
    for col, (a, b) in enumerate(pairs):
        rows = np.flatnonzero(((y_index == a) | (y_index == b)) & np.isfinite(dec[:, col]))
        if len(rows) == 0:
            continue  # A = B = 0: P = 1/2 for this pair
        prob_a[col], prob_b[col] = fit_sigmoid(
            dec[rows, col], y_index[rows] == a, None if weights is None else weights[rows]
        )
    return prob_a, prob_b, time.perf_counter() - start


class ProbabilityMixin:
    """``probability=True`` for an estimator with ``_pairwise_decision(X)``: the fit of the
    sigmoids after the model's, ``predict_proba`` and ``predict_log_proba``."""

    def _fit_probability(self, rows: Any, seed: int, **fold_params: Any) -> None:
        """probA_ and probB_ from a 5-fold cross-validation of this estimator's settings
        (``fold_params`` turn off what the fold fits must not do, e.g. recording history).
        ``rows`` is a ``_validation.TrainingRows``; its weights already hold the class weights."""
        template = clone(self).set_params(
            probability=False, class_weight=None, verbose=False, **fold_params
        )

        def fit_fold(train: np.ndarray) -> Any:
            labels = rows.y_index[train]
            if len(np.unique(labels)) < 2:
                return None
            weights = None if rows.weights is None else rows.weights[train]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                X_train = self._fold_rows(rows.X, train, train)
                fold = clone(template).set_params(**self._fold_params(labels, weights))
                return fold.fit(X_train, labels, sample_weight=weights)

        self.probA_, self.probB_, seconds = fit_platt(
            fit_fold,
            lambda est, train, test: est._pairwise_decision(self._fold_rows(rows.X, test, train)),
            rows.X.shape[0],
            rows.y_index,
            len(rows.classes),
            rows.weights,
            seed,
        )
        self.fit_stats_["probability_seconds"] = seconds

    def _fold_params(self, labels: np.ndarray, weights: Optional[np.ndarray]) -> Dict[str, Any]:
        """Parameters a fold's fit changes for its rows (``labels`` class indices, ``weights``
        the rows' weights or None); none by default."""
        return {}

    def _fold_rows(self, X: Any, rows: np.ndarray, columns: np.ndarray) -> Any:
        """The rows of X a cross-validation fold uses (the fold's training rows are
        ``columns``: a precomputed kernel keeps only their columns)."""
        return X[rows]

    @available_if(lambda self: self.probability)
    @rows_doc(
        "ndarray of shape (n_samples, n_classes)",
        "Columns in the order of ``classes_``; rows sum to 1.",
    )
    @fitted_snapshot
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities: Platt sigmoids of the pairwise decision values, coupled for
        several classes, as SVC(probability=True) computes them (needs ``probability=True``).
        As in SVC, ``predict`` follows the decision values, so on rare rows its class need not
        be the most probable one."""
        check_is_fitted(self)
        if not hasattr(self, "probA_"):
            # Fitted, but without the sigmoids: probability was switched on afterwards.
            raise NotFittedError(
                "predict_proba is not available when fitted with probability=False; fit again "
                "with probability=True"
            )
        return probabilities(
            self._pairwise_decision(X), self.probA_, self.probB_, len(self.classes_)
        )

    @available_if(lambda self: self.probability)
    @rows_doc("ndarray of shape (n_samples, n_classes)")
    @fitted_snapshot
    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Logarithm of ``predict_proba``."""
        return np.log(self.predict_proba(X))
