"""Budgeted epsilon-support vector regression: BudgetSVR."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from sklearn.base import RegressorMixin
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from budgetsvm._budgeted import BudgetedMachine, epoch_callback, file_summary, polish_callback
from budgetsvm._docstrings import rows_doc
from budgetsvm._validation import (
    check_nonnegative,
    check_positive,
    fit_guard,
    fitted_snapshot,
    resolve_gamma,
    to_native,
    weighted_rows,
)

__all__ = ["BudgetSVR"]


@dataclass(kw_only=True, eq=False, repr=False)
class BudgetSVR(RegressorMixin, BudgetedMachine):
    """Gaussian-kernel epsilon-SVR whose model keeps at most ``budget`` support vectors.

    The regression counterpart of ``BudgetSVC``: a budgeted pass over the data chooses at most
    ``budget`` support vectors, then (``polish=True``, the default) their coefficients and an
    intercept are solved exactly on all rows. Training and prediction cost O(budget) per row.

    The budgeted pass. ``solver='bsca'`` (the default) is stochastic coordinate ascent on the
    epsilon-SVR dual without offset, one variable beta_i = a_i - a_i* in [-C, C] per row: the
    exact coordinate step is a soft threshold, beta_i <- clip(S_eps(beta_i + y_i - f(x_i)), -C,
    C), and the support vector of x_i gets the change. ``solver='bsgd'`` is Pegasos on the
    epsilon-insensitive loss (steps of 1 / (lambda t) times sign(y_i - f(x_i)) outside the
    tube); at SVR's usual C its steps are far larger than the targets, so its own coefficients
    are poor and the support vectors it keeps are a worse basis for the polish (fried, B = 500:
    R^2 0.935 polished against BSCA's 0.952; ``docs/regression.md``). Either way the budget is
    kept by merging (default), removing or projecting the support vector of smallest
    coefficient. Regression coefficients have both signs wherever the function bends, so a
    merge may pair the smallest support vector with its nearest one of the opposite sign: the
    merged point then lies beyond the larger of the two, away from the smaller (derived in
    ``merge::opposite_sign_merge``; it always degrades the model less than removing the
    smaller one), and it is taken when it degrades less than the best same-sign merge (fried,
    B = 500: R^2 0.9519 against 0.9467 with same-sign merges only).

    The polish solves ``min 1/2 beta^T K_SS beta + C sum_i w_i max(0, abs(f(x_i) - y_i) -
    epsilon)^2`` with ``f(x) = sum_j beta_j k(x, s_j) + b`` over the kept support vectors S: the squared
    epsilon-insensitive loss (L2-SVR) restricted to span(S), by the same primal Newton solver
    as ``BudgetSVC``'s polish. The budgeted pass works on the targets minus their (weighted)
    median, which the intercept then carries (the best constant under the epsilon-insensitive
    loss; a mean would let one extreme target shift every prediction). A target farther from
    the median than 10,000 times the targets' median absolute deviation makes fit warn: the
    polish's squared loss would let it pull the model.

    Parameters
    ----------
    C : float, default=1.0
        Regularisation, as SVR's: the bound of each dual variable (times the row's sample
        weight), lambda = 1 / (n_samples * C) for BSGD.
    epsilon : float, default=0.1
        Half-width of the tube in which errors cost nothing (as SVR's).
    gamma : {'scale', 'auto'} or float, default='scale'
        Kernel width in exp(-gamma ||x - x'||^2); 'scale' is 1 / (n_features * X.var()).
    budget : int or 'auto', default=100
        Maximum number of support vectors: what a prediction costs. 'auto': chosen by ``fit``
        as ``BudgetSVC``'s, the held-out score R^2 (a doubling must promise 0.0025).
    solver : {'bsca', 'bsgd'}, default='bsca'
    maintenance : {'merge', 'remove', 'project'}, default='merge'
    merge : {'lookup-wd', 'lookup-h', 'gss', 'gss-precise'}, default='lookup-wd'
        How the merge partner is chosen (as ``BudgetSVC``'s).
    epochs : int, default=5
        Passes over the data, each in a fresh random order.
    average : bool, default=False
        Return the average of the budgeted model over the last epoch instead of its last
        state (as ``BudgetSVC``'s; the polish makes it unnecessary). Without the polish, BSGD
        needs a small C for regression, averaged or not (fried-like data at C = 10: R^2 below
        0; at C = 1: 0.90 averaged, 0.85 the last state); an unpolished model that fits the
        training rows worse than their mean is a ``UserWarning`` saying so.
    random_state : int, RandomState or None, default=None
        Seed of the example order.
    verbose : bool, default=False
        Print one line per epoch and per Newton iteration of the polish.
    lam : float or None, default=None
        lambda of the primal objective, used instead of C when given.
    shuffle : bool, default=True
    dual_step : {'decaying', 'full'}, default='decaying'
        BSCA's step size (as ``BudgetSVC``'s).
    sv_storage : {'auto', 'dense', 'sparse'}, default='auto'
    n_jobs : int or None, default=None
        Threads for predictions and the polish.
    polish : bool, default=True
    polish_tol : float, default=1e-5
    polish_max_iter : int, default=50
    polish_cache_size : float, default=1024
        As ``BudgetSVC``'s.

    Attributes
    ----------
    support_vectors_ : ndarray or scipy.sparse.csr_matrix of shape (n_SV, n_features)
    dual_coef_ : ndarray of shape (1, n_SV)
    intercept_ : ndarray of shape (1,)
        ``predict(x) = dual_coef_ . k(support_vectors_, x) + intercept_``.
    gamma_ : float
    budget_ : int
        The budget of the model: ``budget``, or the one ``budget='auto'`` chose.
    lambda_ : float
    n_features_in_ : int
    n_iter_ : int
        Epochs run.
    fit_stats_ : dict
        As ``BudgetSVC``'s, with the polish's under ``'polish'`` and ``budget='auto'``'s search
        under ``'budget_search'``.

    Examples
    --------
    >>> from sklearn.datasets import make_friedman1
    >>> from budgetsvm import BudgetSVR
    >>> X, y = make_friedman1(5000, noise=0.5, random_state=0)
    >>> reg = BudgetSVR(C=10, gamma=0.2, budget=100, random_state=0).fit(X, y)
    >>> reg.support_vectors_.shape
    (100, 10)
    >>> bool(reg.score(X, y) > 0.9)
    True
    """

    epsilon: float = 0.1
    solver: str = "bsca"
    average: bool = False

    def _epsilon(self) -> Optional[float]:
        return float(self.epsilon)

    def _check_params(self) -> None:
        self._check_budget_params()
        check_nonnegative("epsilon", self.epsilon)

    def _rows(
        self, X: Any, y: Any, sample_weight: Any, reset: bool
    ) -> Tuple[Any, np.ndarray, Optional[np.ndarray]]:
        """Validated rows, float64 targets and weights; rows of weight 0 left out."""
        X, y = validate_data(
            self,
            X,
            y,
            accept_sparse="csr",
            dtype=np.float64,
            order="C",
            y_numeric=True,
            reset=reset,
        )
        y = np.ascontiguousarray(y, dtype=np.float64)
        weights, kept = weighted_rows(sample_weight, X.shape[0])
        if kept is not None:
            X, y = X[kept], y[kept]
        return X, y, weights

    @fit_guard
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> BudgetSVR:
        """Train on rows X and real targets y.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Finite real targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies C for each row; rows of weight 0 are left out.

        Returns
        -------
        self : BudgetSVR
        """
        self._check_params()
        if self.budget == "auto":
            X, y, weights = self._rows(X, y, sample_weight, reset=True)
            self._fit_auto_budget(X, y, weights, self._seed(), False, {})
            return self
        X, y, weights = self._rows(X, y, sample_weight, reset=True)
        self.gamma_ = resolve_gamma(self.gamma, X)
        warn_about_extreme_targets(y, self.polish)
        offset = target_offset(y, weights)
        X_native = to_native(X)
        result = self._native_fit(
            X_native,
            np.ascontiguousarray(y - offset),
            0,
            weights,
            self._seed(),
            callback=epoch_callback(self.verbose, None),
        )
        self._stream = result.pop("state", None)
        self._y_offset = offset
        self._set_model(result, intercept=offset)
        if self.polish:
            C = self._c_for(X.shape[0])
            self._polish_native(
                X_native, y, 0, weights, C, polish_callback(self.verbose, None)
            )
        else:
            self._warn_if_worse_than_the_mean(X, y)
        return self

    def _warn_if_worse_than_the_mean(self, X: Any, y: np.ndarray) -> None:
        """The unpolished model checked on up to 2,000 training rows (evenly spaced): a model
        that fits them worse than their mean is useless, and says why (BSGD at a large C: its
        first steps of 1 / (lambda t), lambda = 1 / (n C), dwarf the targets; fried-like data
        at C = 10: R^2 -0.5, at C = 1: 0.93)."""
        rows = np.unique(np.linspace(0, X.shape[0] - 1, min(X.shape[0], 2000)).astype(np.intp))
        # Extreme targets (``warn_about_extreme_targets``) would make any model look as bad
        # as the mean: the rows are judged without them.
        center = np.median(y[rows])
        with np.errstate(over="ignore", invalid="ignore"):
            distance = np.abs(y[rows] - center)
        rows = rows[distance <= EXTREME_TARGET_MADS * max(np.median(distance), 1e-300)]
        target = y[rows]
        with np.errstate(over="ignore", invalid="ignore"):
            spread = float(np.sum((target - target.mean()) ** 2))
            residual = float(np.sum((target - self.predict(X[rows])) ** 2))
        if not (np.isfinite(spread) and spread > 0.0):
            return  # no spread to compare with, or targets whose squares overflow
        r2 = 1.0 - residual / spread
        if r2 >= 0.0:
            return
        advice = (
            "its steps of 1 / (lambda t) (lambda = 1 / (n_samples C)) start far larger than the "
            "targets at this C; use polish=True (the default), solver='bsca', or a smaller C"
            if self.solver == "bsgd"
            else "use polish=True (the default), or check C, epsilon and gamma"
        )
        warnings.warn(
            f"the unpolished {self.solver.upper()} model fits the training rows worse than "
            f"their mean (R^2 {r2:.3g} on {len(rows)} of them, C={self.C}): {advice}",
            UserWarning,
            stacklevel=4,
        )

    @fit_guard
    def polish_coef(self, X: Any, y: Any, sample_weight: Any = None) -> BudgetSVR:
        """Solve the coefficients and the intercept of the fitted model exactly on (X, y),
        keeping its support vectors (the polish of ``polish=True``), e.g. after ``partial_fit``.

        Parameters
        ----------
        X, y, sample_weight
            As ``fit`` takes them (the model's width and ``n_features_in_`` stay).

        Returns
        -------
        self : BudgetSVR
        """
        check_is_fitted(self)
        self._check_polish_params()
        X, y, weights = self._rows(X, y, sample_weight, reset=False)
        warn_about_extreme_targets(y, True)
        self._polish_native(to_native(X), y, 0, weights, self._c_for(X.shape[0]))
        return self

    @available_if(lambda self: self._streams("partial_fit"))
    @fit_guard
    def partial_fit(
        self, X: Any, y: Any, sample_weight: Any = None, *, n_samples: Optional[int] = None
    ) -> BudgetSVR:
        """One BSGD pass over a batch of a stream, continuing the run of the previous calls
        (as ``BudgetSVC.partial_fit``). The first call fixes the targets' offset (the batch's
        median, which the intercept carries) and, with ``n_samples`` (the stream's total rows;
        default the batch's), lambda = 1 / (n_samples C). The model is not polished: call
        ``polish_coef`` on rows in memory for that. Only for ``solver='bsgd'``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            One batch of the stream.
        y : array-like of shape (n_samples,)
            Its real targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies C for each row of the batch; rows of weight 0 are left out.
        n_samples : int, default=None
            First call only: the total number of rows of the stream.

        Returns
        -------
        self : BudgetSVR
        """
        stream = getattr(self, "_stream", None)
        if stream is None:
            self._check_params()
            X, y, weights = self._rows(X, y, sample_weight, reset=True)
            if n_samples is None:
                n_samples = X.shape[0]
            check_positive("n_samples", n_samples, integer=True, minimum=1)
            self.gamma_ = resolve_gamma(self.gamma, X)
            self.lambda_ = self._lambda_for(n_samples)
            self._y_offset = target_offset(y, weights)
            stream = self._new_stream(X.shape[1], 0, n_samples, sp.issparse(X))
        else:
            X, y, weights = self._rows(X, y, sample_weight, reset=False)
            # The call advances a copy: an interrupted or failed call leaves the run as it was.
            stream = stream.copy()
        if X.shape[0] > 0:
            stream.partial_fit(
                to_native(X), np.ascontiguousarray(y - self._y_offset), sample_weight=weights
            )
        self._stream = stream
        self._set_model(stream.result(), intercept=self._y_offset)
        return self

    @available_if(lambda self: self._streams("fit_file"))
    @fit_guard
    def fit_file(
        self,
        path: Any,
        *,
        chunk_rows: int = 100_000,
        n_features: Optional[int] = None,
        progress: Optional[Callable[[int, int], Any]] = None,
    ) -> BudgetSVR:
        """Train BSGD on a LIBSVM / svmlight file of real targets (plain, .gz, .bz2 or .xz)
        without loading it, as ``BudgetSVC.fit_file``: a first pass counts the rows, the
        width, the targets' median (the offset the intercept carries) and the variance for
        ``gamma='scale'``; then ``epochs`` passes feed the chunks to one BSGD run; with
        ``polish=True`` the file is read again for the polish (the targets once, then the rows
        in chunks per pass of the solve). Memory: one chunk, the budget, the polish's cache and
        a few numbers per row (and the first pass keeps each distinct target value once).
        Only for ``solver='bsgd'``.

        Parameters
        ----------
        path : str or path-like
            The LIBSVM file; each line's label is its target.
        chunk_rows : int, default=100_000
            Lines read at a time.
        n_features : int, default=None
            The model's width, at least the file's largest feature index.
        progress : callable, default=None
            ``progress(rows_done, rows_total)``, called after every chunk.

        Returns
        -------
        self : BudgetSVR
        """
        self._check_params()
        file = file_summary(path, chunk_rows, n_features)
        targets = np.asarray(file.summary["labels"], dtype=np.float64)
        if not np.all(np.isfinite(targets)):
            raise ValueError(f"{file.path} has targets that are not finite")
        counts = np.asarray(file.summary["label_counts"], dtype=np.float64)
        offset = target_offset(targets, counts)
        self._y_offset = offset

        def chunk_targets(labels: np.ndarray) -> Tuple[np.ndarray, None]:
            return np.ascontiguousarray(labels - offset), None

        warn_about_extreme_targets(targets, self.polish, counts)
        stream = self._stream_file(file, 0, chunk_targets, progress)
        self._set_model(stream.result(), intercept=offset)
        if self.polish:
            self._apply_polish(self._polish_file(file, file.n_rows, np.zeros(0)))
        return self

    @rows_doc()
    @fitted_snapshot
    def predict(self, X: Any) -> np.ndarray:
        """Predicted targets."""
        return self._expansion_values(X)[:, 0]


def target_offset(y: np.ndarray, weights: Optional[np.ndarray]) -> float:
    """The offset the intercept carries through the budgeted pass: the targets' weighted
    (lower) median, the best constant under the epsilon-insensitive loss. Unlike the mean it
    is not moved by a few extreme targets, whose steps the pass bounds by C; with ``y`` the
    distinct values and ``weights`` their counts it is the median of the rows they stand for."""
    order = np.argsort(y, kind="stable")
    cumulative = np.cumsum(np.ones(len(y)) if weights is None else weights[order])
    return float(y[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])])


#: Targets farther from their median than this many times their median absolute deviation
#: from it dominate the polish's squared loss: fit warns (``warn_about_extreme_targets``).
EXTREME_TARGET_MADS = 1e4


def warn_about_extreme_targets(
    y: np.ndarray, polish: bool, counts: Optional[np.ndarray] = None
) -> None:
    """Warns when a few targets are so far from the rest that the polish's squared loss
    would fit them at the cost of every other row (one target of 1e6 among values of 0-30
    takes R^2 on the others below -1e5), or overflows (1e308). The budgeted pass alone, whose
    steps are bounded by C whatever the target, is not hurt: that is the advice. ``counts``:
    ``y`` holds distinct values, each standing for that many rows (a file's first pass)."""
    if not polish or len(y) < 2:
        return
    center = target_offset(y, counts)
    with np.errstate(over="ignore", invalid="ignore"):
        distance = np.abs(y - center)
    spread = target_offset(distance, counts)
    if spread == 0.0:
        # Over half the targets tie: the spread of the others, if any.
        apart = distance > 0
        if not np.any(apart):
            return
        spread = target_offset(distance[apart], None if counts is None else counts[apart])
    worst = int(np.argmax(distance))
    if not distance[worst] > EXTREME_TARGET_MADS * spread:
        return
    times = f"{distance[worst] / spread:.3g} times"
    warnings.warn(
        f"a target of {y[worst]:.6g} is {times} the targets' median absolute deviation "
        f"({spread:.3g}) from their median ({center:.6g}): the polish's squared loss lets such "
        "targets pull the whole model (or overflows). Remove or clip them, or fit with "
        "polish=False (the budgeted pass bounds each row's pull by C).",
        UserWarning,
        stacklevel=4,
    )

