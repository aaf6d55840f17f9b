"""The budgeted Gaussian-kernel SVM classifier: BudgetSVC."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from sklearn.base import ClassifierMixin, clone
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from budgetsvm import _budgetsvm, _one_vs_one, _probability
from budgetsvm._budgeted import (
    DUAL_STEPS,
    MAINTENANCE,
    MERGE_SEARCHES,
    SOLVERS,
    BudgetedMachine,
    LibsvmFile,
    file_summary,
)
from budgetsvm._budgeted import epoch_callback as _epoch_callback
from budgetsvm._budgeted import polish_callback as _polish_callback
from budgetsvm._budgeted import print_epoch as _print_epoch
from budgetsvm._docstrings import rows_doc
from budgetsvm._history import HistoryRecorder
from budgetsvm._probability import ProbabilityMixin
from budgetsvm._validation import (
    TrainingRows,
    check_choice,
    check_n_jobs,
    check_positive,
    check_sample_weight,
    class_weights,
    fit_guard,
    fitted_snapshot,
    resolve_gamma,
    sv_from_native,
    to_native,
    training_rows,
    weighted_rows,
)

__all__ = ["BudgetSVC", "DUAL_STEPS", "MAINTENANCE", "MERGE_SEARCHES", "MULTICLASS", "SOLVERS"]

#: How several classes are trained (see the class doc): 'auto' is one-vs-one for ``fit``.
MULTICLASS = ("auto", "ovo", "shared")


@dataclass(kw_only=True, eq=False, repr=False)
class BudgetSVC(ProbabilityMixin, ClassifierMixin, BudgetedMachine):
    """Gaussian-kernel SVM whose model keeps at most ``budget`` support vectors.

    Trained by budgeted stochastic gradient descent (``solver='bsgd'``: Pegasos with a budget,
    Wang, Crammer & Vucetic 2012) or budgeted stochastic coordinate ascent in the dual
    (``solver='bsca'``: Qaadan, Schüler & Glasmachers 2019), so training and prediction cost
    O(budget) per example however large the data. Two classes give the binary hinge-loss SVM
    without bias. More classes are trained one-vs-one by default where the budget allows 500
    support vectors per class pair (``multiclass``): one binary
    model per class pair on the rows of its two classes, the budget split over the pairs in
    proportion to the square root of their rows, so the model keeps at most ``budget`` support vectors in all and
    predicts from one kernel block over them. With ``multiclass='shared'`` BSGD trains the
    Crammer-Singer multi-class SVM and BSCA one binary SVM per class (one-vs-rest) on one
    shared set of at most ``budget`` support vectors, each with one coefficient per class. When
    a step would exceed the budget, the support vector with the smallest coefficient is merged
    with its best partner (default), removed or projected.

    The budgeted pass chooses the support vectors well and their coefficients poorly (noisy
    steps, perturbed by every merge). With ``polish=True`` (the default) the coefficients and an
    intercept are then solved exactly over the kept support vectors on all training rows: the
    SVM restricted to the span of the support vectors (its hinge smoothed: squared near the
    margin, linear beyond margin 1/2), by primal Newton steps
    (Keerthi, Chapelle & DeCoste 2006; ``docs/polish.md``), one-vs-rest for several classes.
    That costs about as much as the budgeted pass and brings the model to within a point of the
    exact SVM's accuracy at budget 100 (ijcnn1: 93-96% unpolished, 98% polished).

    Parameters
    ----------
    C : float, default=1.0
        Regularisation, as in LIBSVM: lambda = 1 / (n_samples * C).
    gamma : {'scale', 'auto'} or float, default='scale'
        Kernel width in exp(-gamma ||x - x'||^2); 'scale' is 1 / (n_features * X.var()).
    budget : int or 'auto', default=100
        Maximum number of support vectors of the model, for every solver and any number of
        classes: what a prediction costs (one kernel value per support vector and row). One-vs-one
        splits it over the class pairs in proportion to the square root of their rows (each
        pair at least two; a
        ``partial_fit`` stream, whose class counts are unknown, equally).
        'auto': ``fit`` chooses it, fitting budgets 250, 500, 1,000, ... on the rows outside a
        held-out tenth (at most 20,000 rows) and scoring them there, until one more doubling is
        predicted to gain less than a quarter point of held-out accuracy; the model is the best
        of those fits, or a last fit on every row at the predicted budget (``budget_``, and the
        search in ``fit_stats_['budget_search']``; ``docs/model_selection.md``). Costs about
        twice the fit at the budget chosen; ``partial_fit`` and ``fit_file`` need a number.
    multiclass : {'auto', 'ovo', 'shared'}, default='auto'
        How ``fit`` trains three classes or more. 'auto': 'ovo' where the budget gives every
        class pair at least 500 support vectors, 'shared' below (per support vector the shared
        budget is the more accurate; with enough per pair one-vs-one is as accurate in far less
        time). 'ovo': one budgeted model per class pair, each polished on its two classes'
        rows; a pair's value is positive for its first class, and a row's class is the one with
        most votes (ties to the larger summed values, as SVC's ``decision_function_shape='ovr'``).
        Where a pair has more than 256 rows per support vector of its share, its budgeted pass
        (``fit``, ``fit_file``) runs on a random 256 per vector (C as a fit of them) and the
        polish on all rows: the pass only places the vectors (hardmc, 1,000,000 rows: the same
        accuracy, the passes at half the time). 'shared': one budgeted run whose support
        vectors carry one coefficient per class (Crammer-Singer for BSGD, one-vs-rest for
        BSCA). One-vs-one is faster and as accurate where the classes overlap
        (docs/multiclass_notes.md: six classes, 100,000 rows, at 2-8x the speed). A
        ``partial_fit`` stream started on an unfitted estimator, ``fit_file`` and
        ``budgetsvm.dask.fit`` follow the same rule (streams and files: one BSGD run per pair,
        each fed every row of its two classes; Dask: each pair trained across the partitions'
        rows of its two classes). ``record_history`` traces one run, so 'auto' is 'shared'
        there and 'ovo' is refused. Two classes are the binary model whatever this says.
    solver : {'bsgd', 'bsca'}, default='bsgd'
        BSGD (primal SGD) or BSCA (dual coordinate ascent, one dual variable in [0, C] per
        training example), with ``dual_step`` and ``average`` below keeping it stable at large
        C (docs/bsca_paper002.md).
    maintenance : {'merge', 'remove', 'project'}, default='merge'
    merge : {'lookup-wd', 'lookup-h', 'gss', 'gss-precise'}, default='lookup-wd'
        How the merge partner is chosen: table lookup of the weight degradation (fast, same
        accuracy as GSS, Glasmachers & Qaadan 2018) or golden section search.
    epochs : int, default=5
        Passes over the data, each in a fresh random order.
    average : bool, default=True
        Return the average of the SGD iterates over the last epoch (over the second half of the
        data for one epoch) instead of the last iterate. Averaging removes the last-iterate
        noise of SGD, which on some data (a9a at C = 32) swings test accuracy by 30 points
        between epochs; set False for the papers' plain BSGD. With ``maintenance='remove'``
        the last iterate is returned (removal discards SVs with their averages). BSCA
        averages its budgeted model over the last epoch the same way, which takes out the noise
        merging leaves (a9a at C = 32: 85.3% instead of 84.0%); the dual variables are not
        averaged. Where the average is the model returned (no polish: ``partial_fit``,
        ``polish=False``), binary merges place the merged point for the averaged coefficients,
        so the average stays that of the iterates (a noisy checkerboard stream at gamma = 16:
        94.9%, the iterates' true average 95.0%, the last iterate 88.5%).
    random_state : int, RandomState or None, default=None
        Seed of the example order; an int gives the same model on every platform.
    verbose : bool, default=False
        Print one line of progress per epoch.
    record_history : bool, default=False
        Record per-epoch traces in ``history_`` (objectives, accuracy on the training data and
        on ``fit``'s ``eval_set``, merge fraction, time). Costs one pass of predictions over the
        data per epoch (plus the exact dual for BSCA on up to 10,000 rows), not counted in the
        reported seconds; free when off.
    lam : float or None, default=None
        The regularisation lambda of the papers' objective (``lambda/2 |w|^2`` + mean hinge loss),
        used instead of C when given (BSCA then uses C = 1 / (n_samples * lam)). A stream of
        unknown length is best described by ``lam``: with C, ``partial_fit`` needs the stream
        length (``n_samples``) to turn C into lambda.
    shuffle : bool, default=True
        Visit the examples in a fresh random order every epoch (``fit``) or within every batch
        (``partial_fit``); False keeps the order given.
    dual_step : {'decaying', 'full'}, default='decaying'
        BSCA only: the size of the coordinate steps. 'full' takes the truncated Newton step of
        paper 002 in every epoch. With merging at large C, the budgeted model then drifts away
        from the dual variables, and test accuracy swings between epochs (a9a, C = 32: 66-84%).
        'decaying' takes 1/e of that step in epoch e once the budget has been binding: the
        first epoch is the paper's, and the noise merging injects later dies out (a9a at C = 32,
        B = 500, with averaging: 85.3% instead of 78.9%; docs/bsca_paper002.md). While the
        budget never binds (B >= n) it takes full steps, so both give the exact dual solver.
    sv_storage : {'auto', 'dense', 'sparse'}, default='auto'
        How the support vectors are stored while training and in ``support_vectors_``.
        'dense': one block of n_features values per vector (fastest for dense or
        low-dimensional data). 'sparse': each vector as its non-zeros, so every step, merge and
        prediction costs O(non-zeros) whatever n_features is (text with millions of features).
        'auto' picks 'sparse' for sparse input with more than 16,384 features and 'dense'
        otherwise (docs/sparse.md). Both train the same model.
    class_weight : dict, 'balanced' or None, default=None
        Multiplies C for the rows of each class (as in SVC): a dict label -> weight (labels not
        given weigh 1), or 'balanced', n_samples / (n_classes * the class's total sample weight).
        BSGD scales the hinge step of a row by its weight, BSCA its box to [0, C w_i].
    probability : bool, default=False
        Fit Platt sigmoids on decision values from an internal 5-fold cross-validation (as
        SVC with ``probability=True``; five more fits, each on 4/5 of the rows), which enables
        ``predict_proba`` and ``predict_log_proba``. Several classes: one sigmoid per class
        pair on the score differences f_a - f_b, coupled as LIBSVM (Wu, Lin & Weng 2004).
        Seeded by ``random_state``. Not with ``partial_fit`` or ``fit_file``.
    n_jobs : int or None, default=None
        Threads for this estimator's parallel work (predictions, the polish, the class pairs
        of one-vs-one, the history's kernel values; one budgeted pass is sequential); None uses
        ``budgetsvm.set_num_threads`` (default all cores), -1 all cores.
    polish : bool, default=True
        After the budgeted pass, solve the coefficients and an intercept exactly over its
        support vectors (see above): min 1/2 beta^T K_SS beta + C sum_i w_i loss(y_i f(x_i)) with
        f(x) = sum_j beta_j k(x, s_j) + b, the hinge smoothed (squared near the margin, linear
        beyond margin 1/2), the same C, class and sample weights. False keeps
        the budgeted pass's coefficients (no intercept). ``polish_coef`` does it for a model
        built by ``partial_fit``.
    polish_tol : float, default=1e-5
        The polish stops when a Newton iteration lowers the objective by less than this,
        relative, or (large budgets) when a full Newton step's decrease, squared over the one
        before, says the next iteration would (or once an iteration leaves the active set unchanged: the
        exact solution).
    polish_max_iter : int, default=50
        Newton iterations of the polish at most (a ``ConvergenceWarning`` when reached).
    polish_cache_size : float, default=1024
        MB of kernel values K(X, S) the polish keeps between its iterations; rows beyond it are
        recomputed in every pass, so memory stays bounded for any number of rows.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    support_vectors_ : ndarray or scipy.sparse.csr_matrix of shape (n_SV, n_features)
        CSR with the sparse storage (see ``sv_storage``), a dense array otherwise.
    dual_coef_ : ndarray of shape (1, n_SV) for two classes and one-vs-one, (n_classes, n_SV) for 'shared'
        Coefficient of each support vector in the decision function (per class for 'shared';
        one-vs-one: in its own pair's value).
    intercept_ : ndarray of shape (1,), (n_classes * (n_classes - 1) / 2,) or (n_classes,)
        The constant of the decision function (binary, per pair, per class): the polish's,
        zeros without it.
    multiclass_ : {'binary', 'ovo', 'shared'}
        The design of the fitted model.
    n_support_per_pair_ : ndarray of shape (n_classes * (n_classes - 1) / 2,) or None
        One-vs-one: the support vectors of each class pair (a, b), a < b, in the order (0, 1),
        (0, 2), ..., (1, 2), ...; ``support_vectors_`` holds them pair after pair. None otherwise.
    gamma_ : float
        The kernel width used.
    budget_ : int
        The budget of the model: ``budget``, or the one ``budget='auto'`` chose.
    n_features_in_ : int
    n_iter_ : int
        Epochs run.
    fit_stats_ : dict
        With ``budget='auto'``, ``fit_stats_['budget_search']``: the budget chosen, the held-out
        rows, seconds in all, and its steps (budget, rows fitted on, held-out score or None for
        a fit on every row, seconds, whether it is the model kept). Iterations, insertions, budget maintenance events and their frequency, time in
        maintenance vs total, mean weight degradation per event, ``mean_sv_nnz`` (stored
        non-zeros per support vector: merging makes sparse vectors denser). BSCA adds ``updates`` (steps
        that changed a dual variable) and ``dropped_svs`` (SVs whose coefficients returned to 0);
        one iteration is a visit of a row, which steps every one-vs-rest problem. With the
        polish, ``fit_stats_['polish']``: its objective before and after (per output), Newton
        iterations, rows that changed active sets, cached rows, passes over the rows, seconds
        (kernel values, Gram updates, factorisations, all). One-vs-one sums the counts over
        the pairs and lists each pair's own figures (its classes, rows, budget, SVs, polish;
        ``fit``'s and ``fit_file``'s also ``pass_rows``, the rows its budgeted pass saw) under
        ``fit_stats_['pairs']``.
    lambda_ : float
        The regularisation lambda used (BSGD; for BSCA 1 / (n_samples * C)).
    class_weight_ : ndarray of shape (n_classes,)
        The weight of each class (ones without ``class_weight``).
    probA_, probB_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
        With ``probability=True``: the sigmoid 1 / (1 + exp(A d + B)) of each class pair (a, b),
        a < b, in LIBSVM's order, d the pair's decision value (positive for a).
    history_ : dict of lists or None
        With ``record_history=True``, one entry per epoch under the keys ``epoch``, ``seconds``
        (training time so far), ``primal`` (C-form primal objective ``1/2 |w|^2 + C sum`` of hinge
        losses of the budgeted model, ``|w|^2 = beta^T K beta``), ``dual`` (BSCA's dual objective
        sum(alpha) - 1/2 alpha^T Q alpha, NaN for BSGD and above 10,000 rows, where it would
        cost O(n^2) kernel values), ``train_accuracy``, ``val_accuracy`` (NaN without
        ``eval_set``), ``maintenance_fraction`` (share of the epoch's steps that triggered
        budget maintenance), ``n_sv`` and ``mean_sv_nnz``. For BSGD with ``average=True`` the entries before the
        last epoch describe the last iterate, the last one the returned average. The entries
        describe the budgeted pass: with the polish, the returned model is the polished one
        (``fit_stats_['polish']`` has its objective). None when off.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from budgetsvm import BudgetSVC
    >>> X, y = make_classification(5000, n_features=10, random_state=0)
    >>> clf = BudgetSVC(budget=50, epochs=3, random_state=0).fit(X, y)
    >>> clf.support_vectors_.shape
    (50, 10)
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    record_history: bool = False
    class_weight: Any = None
    probability: bool = False
    multiclass: str = "auto"

    def _check_params(self) -> None:
        self._check_budget_params()
        check_choice("record_history", self.record_history, (True, False))
        check_choice("probability", self.probability, (True, False))
        check_choice("multiclass", self.multiclass, MULTICLASS)

    @fit_guard
    def fit(
        self,
        X: Any,
        y: Any,
        sample_weight: Any = None,
        *,
        eval_set: Optional[Tuple[Any, Any]] = None,
        _compare_with: Optional[str] = None,
        _callback: Optional[Callable[[Dict[str, Any]], Any]] = None,
    ) -> BudgetSVC:
        """Train on X and labels y.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows, dense or sparse (CSR is used as is, without a copy).
        y : array-like of shape (n_samples,)
            Class labels, of any type scikit-learn accepts.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies C for each row, as in SVC; rows of weight 0 are left out.
        eval_set : tuple (X_val, y_val), default=None
            Adds validation accuracy per epoch to ``history_`` (needs ``record_history=True``).

        Returns
        -------
        self : BudgetSVC

        Other Parameters
        ----------------
        _compare_with : str, default=None
            For benchmarks: a second merge search run at every merge event, counting how often
            it chooses the same partner (``fit_stats_['merge_agreement']``).
        _callback : callable, default=None
            For the command line: called with a progress dict after every epoch.
        """
        self._check_params()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, order="C")
        rows = training_rows(type(self).__name__, X, y, sample_weight, self.class_weight)
        self.classes_ = rows.classes
        self.class_weight_ = rows.class_weights
        seed = self._seed()
        if self.budget == "auto":
            weights, kept = weighted_rows(sample_weight, X.shape[0])
            if kept is not None:
                X, y = X[kept], y[kept]
            fit_params = dict(eval_set=eval_set, _compare_with=_compare_with, _callback=_callback)
            self._fit_auto_budget(X, y, weights, seed, True, fit_params)
            return self
        self._fit_rows(rows, seed, eval_set, _compare_with, _callback)
        if self.probability:
            self._fit_probability(rows, seed, record_history=False)
        return self

    def _fit_rows(
        self,
        rows: TrainingRows,
        seed: int,
        eval_set: Optional[Tuple[Any, Any]] = None,
        _compare_with: Optional[str] = None,
        _callback: Optional[Callable[[Dict[str, Any]], Any]] = None,
    ) -> None:
        """The solver's run on the kept rows; sets the model attributes."""
        X = rows.X
        self.gamma_ = resolve_gamma(self.gamma, X)
        if _one_vs_one.one_vs_one_for(self.multiclass, int(self.budget), len(rows.classes)):
            self._fit_one_vs_one(rows, seed, _compare_with, _callback)
            return
        X_native = to_native(X)
        recorder = self._history_recorder(X_native, rows.y_index, rows.weights, eval_set)
        C = self._c_for(X.shape[0])
        result = self._native_fit(
            X_native,
            rows.y_index,
            len(rows.classes),
            rows.weights,
            seed,
            compare_with=_compare_with,
            callback=_epoch_callback(self.verbose, _callback),
            observer=recorder,
        )
        self.history_ = recorder.history if recorder is not None else None
        self._set_run(result, _compare_with)
        if self.polish:
            self._polish_rows(X_native, rows.y_index, rows.weights, C, _callback)

    def _set_run(self, result: Dict[str, Any], compare_with: Optional[str]) -> None:
        """The model of a budgeted run's result, and the run itself (BSGD's, which partial_fit
        continues; BSCA has none)."""
        self._stream = result.pop("state", None)
        if compare_with is not None:
            # NaN when no merge was compared (no merges, or multi-class, where GSS is the only search).
            compared = result["compared_merges"]
            result["merge_agreement"] = (
                result["agreeing_merges"] / compared if compared else float("nan")
            )
        self._set_model(result)

    def _set_model(self, result: Dict[str, Any], intercept: Any = 0.0) -> None:
        super()._set_model(result, intercept)
        # One budgeted run: the binary model, or the classes sharing its support vectors.
        self.multiclass_ = "binary" if len(self.classes_) == 2 else "shared"
        self.n_support_per_pair_ = None
        self._pair_streams = None

    def _fit_one_vs_one(
        self,
        rows: TrainingRows,
        seed: int,
        _compare_with: Optional[str],
        _callback: Optional[Callable[[Dict[str, Any]], Any]],
    ) -> None:
        """One binary budgeted model per class pair on its two classes' rows, the budget split
        over the pairs (``budgetsvm._one_vs_one``); sets the grouped model."""
        if self.record_history:
            raise ValueError(
                "record_history traces the epochs of one budgeted run; a one-vs-one model is one "
                "run per class pair (their figures are in fit_stats_['pairs']); set "
                "multiclass='shared' to record the history of several classes"
            )
        started = time.perf_counter()
        n_classes = len(rows.classes)
        pairs = _probability.class_pairs(n_classes)
        members = _one_vs_one.pair_rows(rows.y_index, n_classes)
        budgets = _one_vs_one.pair_budgets(int(self.budget), [len(m) for m in members])
        seeds = [_one_vs_one.pair_seed(seed, p) for p in range(len(pairs))]
        # A pass only places the support vectors: with the polish to follow, a large pair's
        # pass sees a subset of its rows (PASS_ROWS_PER_SV), its C (or lambda) as a fit of it.
        passed = [
            _one_vs_one.pass_rows(index, budget, pair_seed) if self.polish else index
            for index, budget, pair_seed in zip(members, budgets, seeds)
        ]
        # The budgeted passes of all pairs at once (each is sequential: the pairs spread over
        # the cores), then each pair's polish, which is parallel itself.
        runs = [
            (index.astype(np.int64), budget, pair_seed, self._c_for(len(index)))
            for index, budget, pair_seed in zip(passed, budgets, seeds)
        ]
        # (Each run's budget, seed and C replace the settings'.)
        settings = self._run_settings(
            self._c_for(rows.X.shape[0]), seed, rows.weights, _compare_with
        )
        results = _budgetsvm.fit_pairs(
            to_native(rows.X),
            rows.y_index,
            runs,
            solver=self.solver,
            dual_step=self.dual_step,
            average=bool(self.average),
            n_threads=check_n_jobs(self.n_jobs),
            lambda_=None if self.lam is None else float(self.lam),
            callback=_epoch_callback(
                self.verbose, _one_vs_one.pair_progress(_callback, len(pairs), int(self.epochs))
            ),
            **settings,
        )
        # Each pair is a binary BudgetSVC on the kernel width of all rows.
        template = clone(self).set_params(
            probability=False, class_weight=None, record_history=False, gamma=self.gamma_
        )
        support_vectors, coef, intercept, stats, streams = [], [], [], [], []
        method = _one_vs_one.PolishMethodProbe()
        for (a, b), index, n_passed, budget, result in zip(
            pairs, members, map(len, passed), budgets, results
        ):
            pair_started = time.perf_counter()
            model = clone(template).set_params(budget=budget)
            model.classes_ = rows.classes[[a, b]]
            model.class_weight_ = rows.class_weights[[a, b]]
            model.gamma_ = self.gamma_
            model.lambda_ = model._lambda_for(len(index))
            model.history_ = None
            model._set_run(result, _compare_with)
            if self.polish:
                model._polish_rows(
                    to_native(rows.X[index]),
                    np.ascontiguousarray(rows.y_index[index] == b, dtype=np.uint32),
                    None if rows.weights is None else rows.weights[index],
                    self._c_for(len(index)),
                    _callback,
                    method.hessian_free_from(),
                )
                method.record(model.fit_stats_["polish"], model.support_vectors_.shape[0])
            if self.verbose:
                print(
                    f"pair {len(stats) + 1}/{len(pairs)} ({rows.classes[a]!r}, "
                    f"{rows.classes[b]!r}): {len(index):,} rows ({n_passed:,} in the pass), "
                    f"{model.support_vectors_.shape[0]} of budget {budget} SVs, budgeted pass "
                    f"{model.fit_stats_['seconds']:.2f} s, polish "
                    f"{time.perf_counter() - pair_started:.2f} s"
                )
            # The binary model is positive for its second class; a pair's value for its first.
            support_vectors.append(model.support_vectors_)
            coef.append(-np.asarray(model.dual_coef_[0], dtype=np.float64))
            intercept.append(-float(model.intercept_[0]))
            stats.append(
                dict(
                    model.fit_stats_,
                    classes=(int(a), int(b)),
                    rows=int(len(index)),
                    pass_rows=int(n_passed),
                    budget=int(budget),
                    lambda_=float(model.lambda_),
                )
            )
            streams.append(model._stream)
        self.lambda_ = self._lambda_for(rows.X.shape[0])
        self.n_iter_ = int(self.epochs)
        self.history_ = None
        self._stream = None
        # Each pair's BSGD run, which partial_fit continues (BSCA has none).
        self._pair_streams = streams if all(s is not None for s in streams) else None
        self._set_pairs(support_vectors, coef, intercept, stats, time.perf_counter() - started)

    def _set_pairs(
        self,
        support_vectors: List[Any],
        coef: List[np.ndarray],
        intercept: List[float],
        stats: List[Dict[str, Any]],
        seconds: float,
    ) -> None:
        """The one-vs-one model from its pairs' vectors, coefficients (positive for each pair's
        first class) and intercepts, and ``fit_stats_`` from their figures."""
        self.budget_ = int(self.budget)
        self.support_vectors_ = _one_vs_one.stack(support_vectors)
        self.dual_coef_ = np.ascontiguousarray(np.concatenate(coef)[None, :])
        self.intercept_ = np.asarray(intercept, dtype=np.float64)
        self.n_support_per_pair_ = np.array([len(c) for c in coef], dtype=np.int64)
        self.multiclass_ = "ovo"
        for pair, c in zip(stats, coef):
            pair["n_sv"] = len(c)
        self.fit_stats_ = _one_vs_one.summed_stats(stats, seconds)
        sv = self.support_vectors_
        stored = sv.nnz if sp.issparse(sv) else np.count_nonzero(sv)
        self.fit_stats_["mean_sv_nnz"] = stored / sv.shape[0] if sv.shape[0] else 0.0

    def _partial_fit_pairs(self, X: Any, y: Any, classes: Any, sample_weight: Any) -> BudgetSVC:
        """``partial_fit`` of a one-vs-one model (after ``fit``, ``fit_file`` or a one-vs-one
        stream's first call): each pair's run continues on the batch's rows of its two
        classes."""
        streams = getattr(self, "_pair_streams", None)
        if streams is None:
            raise ValueError(
                "this one-vs-one model has no runs to continue (fitted by BSCA, or loaded from "
                "a model file); fit it with solver='bsgd' first, or start a new stream on an "
                "unfitted estimator"
            )
        X, y = validate_data(
            self, X, y, accept_sparse="csr", dtype=np.float64, order="C", reset=False
        )
        _check_classes_unchanged(classes, self.classes_, "the classes of the fitted model")
        y_index = _class_indices(self.classes_, y)
        weights = _batch_weights(sample_weight, X, y_index, self.class_weight_)
        # The call advances copies: an interrupted or failed call leaves the runs as they were.
        self._step_pairs([s.copy() for s in streams], X, y_index, weights)
        return self

    def _new_pair_streams(self, width: int, n_samples: int, sparse_input: bool) -> List[Any]:
        """The pairs' fresh runs of a one-vs-one stream (``partial_fit`` on an unfitted
        estimator, ``classes_`` set), and ``fit_stats_['pairs']`` for them.

        The budgets are fixed before any row is seen, and a stream's class counts are unknown
        (its first batch may hold a few classes only: streams sorted by class, or by time), so
        the budget is split equally over the pairs, the remainder to the first pairs. Each
        pair's run takes 2 / n_classes of ``n_samples`` as its rows (its share if the classes
        are balanced) for lambda = 1 / (rows C) and the start of its averaging, as ``fit``
        gives each pair the lambda of its own rows."""
        n_classes = len(self.classes_)
        pairs = _probability.class_pairs(n_classes)
        budgets = _one_vs_one.pair_budgets(int(self.budget), [1] * len(pairs))
        rows = max(1, int(round(2 * n_samples / n_classes)))
        seed = self._seed()
        streams = [
            self._new_stream(
                width,
                2,
                rows,
                sparse_input,
                budget=budget,
                seed=_one_vs_one.pair_seed(seed, p),
            )
            for p, budget in enumerate(budgets)
        ]
        self.fit_stats_ = {
            "pairs": [
                dict(
                    classes=(int(a), int(b)),
                    rows=0,
                    budget=int(budget),
                    lambda_=self._lambda_for(rows),
                )
                for (a, b), budget in zip(pairs, budgets)
            ]
        }
        return streams

    def _step_pairs(
        self,
        streams: List[Any],
        X: Any,
        y_index: np.ndarray,
        weights: Optional[np.ndarray],
        average_placement: bool = True,
    ) -> None:
        """One pass of the pairs' runs over a batch of validated rows (each over the rows of
        its two classes; rows of weight 0 left out), the runs at once on the thread pool; the
        model is then the runs', unpolished, and ``_pair_streams`` the runs."""
        started = time.perf_counter()
        n_classes = len(self.classes_)
        pairs = _probability.class_pairs(n_classes)
        _budgetsvm.partial_fit_pairs(
            streams,
            to_native(X),
            y_index,
            pairs,
            sample_weight=weights,
            average_placement=average_placement,
            n_threads=check_n_jobs(self.n_jobs),
        )
        used = y_index if weights is None else y_index[weights > 0]
        counts = np.bincount(used, minlength=n_classes)
        if len(used):
            self.n_iter_ = int(getattr(self, "n_iter_", 0)) + 1
        before = self.fit_stats_.get("pairs", [])
        info = [
            dict(
                classes=(int(a), int(b)),
                rows=int(old.get("rows", 0)) + int(counts[a] + counts[b]),
                budget=old.get("budget"),
                lambda_=old.get("lambda_"),
            )
            for (a, b), old in zip(pairs, before)
        ]
        self._set_stream_pairs(streams, info, time.perf_counter() - started)

    def _set_stream_pairs(
        self, streams: List[Any], info: List[Dict[str, Any]], seconds: float
    ) -> None:
        """The one-vs-one model of the pairs' BSGD runs (unpolished: no intercepts), their
        figures with ``info`` (classes, rows, budget, lambda_ per pair) in ``fit_stats_``."""
        results = [s.result() for s in streams]
        stats = [
            {**{k: v for k, v in r.items() if k not in ("support_vectors", "coef")}, **extra}
            for r, extra in zip(results, info)
        ]
        self._set_pairs(
            [sv_from_native(r["support_vectors"]) for r in results],
            [-np.asarray(r["coef"])[:, 0] for r in results],
            [0.0] * len(results),
            stats,
            seconds,
        )
        self._pair_streams = streams

    def _polish_rows(
        self,
        X_native: Any,
        y_index: np.ndarray,
        weights: Optional[np.ndarray],
        C: float,
        _callback: Optional[Callable[[Dict[str, Any]], Any]] = None,
        hessian_free_from: Optional[int] = None,
    ) -> None:
        """Polishes the current model on rows already validated (see ``polish``)."""
        self._polish_native(
            X_native,
            y_index,
            len(self.classes_),
            weights,
            C,
            _polish_callback(self.verbose, _callback),
            hessian_free_from,
        )

    def _polish_pairs(
        self,
        X: Any,
        y_index: np.ndarray,
        weights: Optional[np.ndarray],
        _callback: Optional[Callable[[Dict[str, Any]], Any]] = None,
    ) -> None:
        """``polish_coef`` of a one-vs-one model on validated rows: each pair's coefficients
        and intercept solved on the rows of its two classes, warm-started from the current
        ones."""
        members = _one_vs_one.pair_rows(y_index, len(self.classes_))

        def solve(model: BudgetSVC, p: int, b: int, hessian_free_from: Optional[int]) -> bool:
            index = members[p]
            if len(index) == 0:
                return False  # no rows of this pair: its coefficients stay
            model._polish_native(
                to_native(X[index]),
                np.ascontiguousarray(y_index[index] == b, dtype=np.uint32),
                2,
                None if weights is None else weights[index],
                self._c_for(len(index)),
                _polish_callback(self.verbose, _callback),
                hessian_free_from,
            )
            return True

        self._polish_each_pair(solve)

    def _polish_each_pair(
        self, solve: Callable[[BudgetSVC, int, int, Optional[int]], bool]
    ) -> None:
        """The polish of every pair of a one-vs-one model, one after the other:
        ``solve(model, p, b, hessian_free_from)`` polishes ``model``, pair p's binary BudgetSVC
        (positive for its second class, b) warm-started from its current coefficients and
        intercept, and says whether it did (False: no rows, the pair stays); the first pair
        polished decides the others' method (``PolishMethodProbe``)."""
        n_classes = len(self.classes_)
        starts = np.concatenate(([0], np.cumsum(self.n_support_per_pair_)))
        coef = self.dual_coef_[0].copy()
        intercept = self.intercept_.copy()
        pairs = list(self.fit_stats_.get("pairs", []))
        method = _one_vs_one.PolishMethodProbe()
        template = clone(self).set_params(probability=False, class_weight=None)
        for p, (a, b) in enumerate(_probability.class_pairs(n_classes)):
            group = slice(starts[p], starts[p + 1])
            model = clone(template)
            model.classes_ = self.classes_[[a, b]]
            model.gamma_ = self.gamma_
            model.support_vectors_ = self.support_vectors_[group]
            model.dual_coef_ = -coef[None, group]
            model.intercept_ = np.array([-intercept[p]])
            model.fit_stats_ = {}
            if not solve(model, p, b, method.hessian_free_from()):
                continue
            method.record(model.fit_stats_["polish"], model.support_vectors_.shape[0])
            coef[group] = -model.dual_coef_[0]
            intercept[p] = -float(model.intercept_[0])
            if p < len(pairs):
                pairs[p] = {**pairs[p], "polish": model.fit_stats_["polish"]}
        self.dual_coef_ = np.ascontiguousarray(coef[None, :])
        self.intercept_ = intercept
        if pairs:
            self.fit_stats_ = {**self.fit_stats_, "pairs": pairs}
            self.fit_stats_["polish_seconds"] = sum(
                q.get("polish", {}).get("seconds", 0.0) for q in pairs
            )

    @fit_guard
    def polish_coef(self, X: Any, y: Any, sample_weight: Any = None) -> BudgetSVC:
        """Solve the coefficients and intercepts of the fitted model exactly on (X, y), keeping
        its support vectors: the polish of ``polish=True`` (see the class doc) for a model
        built otherwise, e.g. by ``partial_fit`` on a stream whose rows (or a large sample of
        them) fit in memory, or to re-fit the coefficients on other data.

        Uses the model's C (lambda = 1 / (n C) with ``lam`` and these rows), ``class_weight_``,
        ``polish_tol``, ``polish_max_iter`` and ``polish_cache_size``, and warm-starts from the
        current coefficients. A later ``partial_fit`` continues the budgeted run, whose model
        replaces the polished one.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,)
            Their labels, all among ``classes_``.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies C for each row, as in ``fit``; rows of weight 0 are left out.

        Returns
        -------
        self : BudgetSVC
        """
        check_is_fitted(self)
        self._check_polish_params()
        X, y = validate_data(
            self, X, y, accept_sparse="csr", dtype=np.float64, order="C", reset=False
        )
        y_index = _class_indices(self.classes_, y)
        class_w = getattr(self, "class_weight_", np.ones(len(self.classes_)))
        weights = _batch_weights(sample_weight, X, y_index, np.asarray(class_w, dtype=np.float64))
        if weights is not None and not np.all(weights > 0):
            keep = np.flatnonzero(weights > 0)
            if len(keep) == 0:
                raise ValueError("sample_weight leaves no rows to polish on (all weights are 0)")
            X, y_index, weights = X[keep], y_index[keep], weights[keep]
        if X.shape[0] == 0:
            raise ValueError("polish_coef needs at least one row")
        if not hasattr(self, "intercept_"):  # a model unpickled from before the polish
            self.intercept_ = np.zeros(self.dual_coef_.shape[0])
        if getattr(self, "multiclass_", None) == "ovo":
            self._polish_pairs(X, y_index, weights)
        else:
            self._polish_rows(to_native(X), y_index, weights, self._c_for(X.shape[0]))
        return self

    @available_if(lambda self: self._streams("partial_fit") and not self.probability)
    @fit_guard
    def partial_fit(
        self,
        X: Any,
        y: Any,
        classes: Any = None,
        sample_weight: Any = None,
        *,
        n_samples: Optional[int] = None,
    ) -> BudgetSVC:
        """One BSGD pass over a batch of a stream, continuing the run of the previous calls.

        Several classes: a stream started here follows ``fit``'s rule (``multiclass``): one
        run whose support vectors every class shares ('shared'), or one-vs-one, one binary run
        per class pair, each call stepping every pair's run over the batch's rows of its two
        classes (all pairs at once on the thread pool; a pair without rows in the batch waits).
        The pairs' budgets are fixed on the first call, before the class counts are known, so
        the budget is split equally over the pairs (the remainder to the first pairs); each
        pair's run takes 2 / n_classes of ``n_samples`` as its number of rows (its share when
        the classes are balanced) for lambda = 1 / (rows C) and for the start of its averaging,
        as ``fit`` gives each pair the lambda of its own rows (``lam`` sets one lambda for
        all). A pair's model is then exactly the binary stream of its rows
        (``fit_stats_['pairs']``: each pair's classes, budget, rows seen, lambda), while the
        equality with ``fit`` below does not hold for one-vs-one (``fit`` splits the budget and
        sets the lambdas by the pairs' counted rows). After a one-vs-one ``fit`` or
        ``fit_file`` each pair's run continues the same way. The one-vs-one model returned is
        the pairs' runs, unpolished (``polish_coef`` polishes each pair on its rows).

        The first call on an unfitted estimator starts a run and needs ``classes``, every
        label of the stream; later calls, and calls after ``fit`` or ``fit_file``, continue
        the run: the step counter t of the learning rate 1 / (lambda t), the support vectors
        and their scale, the budget maintenance and the averaging all go on where the
        previous call stopped, so the calls train one model (after ``fit``, as if the stream
        were more rows of a last epoch).
        Each call is one pass over its batch (``epochs`` is not used), in a random order within
        the batch with ``shuffle=True`` (the default) or in the order given.

        How it relates to ``fit``: with ``epochs=1``, ``shuffle=False`` and the same
        parameters, batches passed in order train exactly the model ``fit`` trains on their
        concatenation, provided the first call gets ``n_samples`` = the total number of rows
        and gamma is a number. ``n_samples`` (first call only; default: the rows of that
        call) sets what the total number of rows sets in ``fit``: lambda = 1 / (n_samples C)
        unless ``lam`` is given, and with ``average=True`` the step n_samples / 2 + 1 from
        which iterates are averaged (``fit`` averages over the second half of one epoch; here
        averaging then runs to the end of the stream). ``gamma='scale'`` or ``'auto'`` is
        resolved on the first batch. The state survives pickling, so a stream can be
        continued in another process; ``fit`` starts a new one.

        ``sample_weight`` and a ``class_weight`` dict weigh the rows of the batch as in ``fit``
        (``class_weight='balanced'`` needs the whole stream's class counts: compute them and
        pass a dict).

        Only for ``solver='bsgd'`` (BSCA keeps one dual variable per training row), and not
        with ``probability=True`` (its cross-validation needs all rows at once).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            One batch of the stream.
        y : array-like of shape (n_samples,)
            Its labels.
        classes : array-like, default=None
            Every label the stream will contain; required on the first call.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies C for each row of the batch; rows of weight 0 are left out.
        n_samples : int, default=None
            First call only: the total number of rows of the stream (see above).

        Returns
        -------
        self : BudgetSVC
        """
        if isinstance(self.class_weight, str):
            raise ValueError(
                "class_weight='balanced' needs the class counts of the whole stream, which "
                "partial_fit does not see; pass a dict, e.g. from "
                "sklearn.utils.class_weight.compute_class_weight"
            )
        if getattr(self, "multiclass_", None) == "ovo":
            return self._partial_fit_pairs(X, y, classes, sample_weight)
        stream = getattr(self, "_stream", None)
        pair_streams = None
        if stream is None:
            self._check_params()
            if classes is None:
                raise ValueError(
                    "classes must be given on the first call to partial_fit (every label the "
                    "stream will contain)"
                )
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, order="C")
            check_classification_targets(y)
            classes_ = np.unique(np.asarray(classes))
            if len(classes_) < 2:
                raise ValueError(
                    f"partial_fit needs at least two classes; classes={classes_.tolist()!r}"
                )
            if n_samples is None:
                n_samples = X.shape[0]
            check_positive("n_samples", n_samples, integer=True, minimum=1)
            self.classes_ = classes_
            self.class_weight_ = class_weights(self.class_weight, classes_)
            self.gamma_ = resolve_gamma(self.gamma, X)
            self.lambda_ = self._lambda_for(n_samples)
            if _one_vs_one.one_vs_one_for(self.multiclass, int(self.budget), len(classes_)):
                pair_streams = self._new_pair_streams(X.shape[1], n_samples, sp.issparse(X))
            else:
                stream = self._new_stream(X.shape[1], len(classes_), n_samples, sp.issparse(X))
            self.history_ = None
        else:
            X, y = validate_data(
                self, X, y, accept_sparse="csr", dtype=np.float64, order="C", reset=False
            )
            # The call advances a copy: an interrupted or failed call leaves the run as it was.
            stream = stream.copy()
            _check_classes_unchanged(
                classes, self.classes_, "the classes of the first partial_fit call"
            )
        y_index = _class_indices(self.classes_, y)
        weights = _batch_weights(sample_weight, X, y_index, self.class_weight_)
        if pair_streams is not None:
            self.n_iter_ = 0
            self._stream = None
            self._step_pairs(pair_streams, X, y_index, weights)
            return self
        if weights is not None and not np.all(weights > 0):
            keep = np.flatnonzero(weights > 0)
            X, y_index, weights = X[keep], y_index[keep], weights[keep]
        if X.shape[0] > 0:
            stream.partial_fit(to_native(X), y_index, sample_weight=weights)
        self._stream = stream
        self._set_model(stream.result())
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
    ) -> BudgetSVC:
        """Train BSGD on a LIBSVM / svmlight file (plain, .gz, .bz2 or .xz) without loading it.

        The file is read ``chunk_rows`` lines at a time: one pass first to count the rows and
        find the classes and the width (and the variance for ``gamma='scale'``), then
        ``epochs`` passes that feed the chunks to the BSGD run (one-vs-one: runs, one per class
        pair), as ``partial_fit`` does. Memory is one chunk plus the budget, whatever the file's
        size.

        How it relates to ``fit`` on the loaded file (``load_svmlight_file``): with
        ``shuffle=False`` and a numeric gamma the model is identical, for any ``epochs``
        (same lambda from the file's row count, same averaging window). With ``shuffle=True``
        each epoch shuffles the rows within each chunk rather than the whole file, so the
        order, and the model, differ. ``gamma='scale'`` uses the variance of the file's
        entries computed from running sums, equal to ``fit``'s up to rounding.

        With ``polish=True`` the file is then read again for the polish: once for its labels,
        and once per pass of the solve in chunks (about two passes per Newton iteration while
        K(X, S) exceeds ``polish_cache_size``, none once it fits), so memory stays one chunk
        plus the cache, plus a few numbers per row (labels, decision values).

        Several classes train as ``fit`` does (``multiclass``): one run whose support vectors
        every class shares, or one-vs-one, one BSGD run per class pair, each chunk's rows fed
        to the runs of the pairs of their classes (all pairs at once on the thread pool), the
        budget split over the pairs by their rows in the file as ``fit`` splits it (counted by
        the first pass), each
        run with the lambda of its pair's rows; then each pair is polished on the rows of its
        two classes, one pair after another, each reading the file as the polish above does
        (the other classes' rows read and skipped). With ``shuffle=False`` both designs give
        ``fit``'s model on the loaded file (one-vs-one: the budgeted runs exactly, the polish
        to rounding where the first pair's solve probes the Hessian-free path, whose sums
        follow the chunks); a pair of more than 256 rows per support vector passes the same
        random subset of its rows as in ``fit``.

        ``n_features`` widens the model to at least that many features (a test file may lack
        the last ones). ``class_weight`` applies as in ``fit`` ('balanced' from the first
        pass's class counts). ``progress(rows_done, rows_total)`` is called after every chunk, over
        all epochs (``rows_total = epochs * n_rows``). The run can be continued with
        ``partial_fit``.

        Parameters
        ----------
        path : str or path-like
            The LIBSVM file.
        chunk_rows : int, default=100_000
            Lines read at a time.
        n_features : int, default=None
            The model's width, at least the file's largest feature index.
        progress : callable, default=None
            ``progress(rows_done, rows_total)``, called after every chunk.

        Returns
        -------
        self : BudgetSVC
        """
        self._check_params()
        if self.probability:
            raise ValueError(
                "probability=True needs fit (its cross-validation refits on the rows in "
                "memory); fit_file cannot estimate probabilities"
            )
        file = file_summary(path, chunk_rows, n_features)
        # Labels equal as numbers are one class (-0 and 0 in a file), as in fit.
        classes, merged = np.unique(
            np.asarray(file.summary["labels"], dtype=np.float64) + 0.0, return_inverse=True
        )
        counts = np.bincount(merged, weights=file.summary["label_counts"], minlength=len(classes))
        if len(classes) < 2:
            raise ValueError(
                "BudgetSVC needs samples of at least two classes; the file contains only one "
                f"class: {classes[0]!r}"
            )
        check_classification_targets(classes)
        self.classes_ = classes
        self.class_weight_ = class_weights(
            self.class_weight, classes, np.arange(len(classes)), counts
        )
        row_class_weights = None if self.class_weight is None else self.class_weight_
        if _one_vs_one.one_vs_one_for(self.multiclass, int(self.budget), len(classes)):
            self._fit_file_pairs(file, counts, row_class_weights, progress)
            return self

        def chunk_targets(labels: np.ndarray) -> Tuple[np.ndarray, Optional[np.ndarray]]:
            y_chunk = _class_indices(classes, labels)
            return y_chunk, None if row_class_weights is None else row_class_weights[y_chunk]

        self.history_ = None
        stream = self._stream_file(file, len(classes), chunk_targets, progress)
        self._set_model(stream.result())
        self.n_iter_ = int(self.epochs)
        self.fit_stats_["epochs"] = int(self.epochs)
        if self.polish:
            result = self._polish_file(
                file,
                file.n_rows,
                np.ascontiguousarray(classes, dtype=np.float64),
                class_weights=None
                if row_class_weights is None
                else np.ascontiguousarray(row_class_weights, dtype=np.float64),
            )
            self._apply_polish(result)
        return self

    def _fit_file_pairs(
        self,
        file: LibsvmFile,
        counts: np.ndarray,
        row_class_weights: Optional[np.ndarray],
        progress: Optional[Callable[[int, int], Any]],
    ) -> None:
        """``fit_file`` one-vs-one (``classes_`` and ``class_weight_`` set): every pair's BSGD
        run fed the rows of its two classes from each chunk, all pairs at once, ``epochs``
        times; the budget split by the pairs' rows in the file (counted by the first pass) as
        ``fit`` splits it, each run with the lambda of its own rows; then each pair polished on
        its rows of the file (``polish_file`` with ``pair``)."""
        started = time.perf_counter()
        classes = self.classes_
        n_classes = len(classes)
        pairs = _probability.class_pairs(n_classes)
        pair_rows = [int(counts[a] + counts[b]) for a, b in pairs]
        budgets = _one_vs_one.pair_budgets(int(self.budget), pair_rows)
        self._fit_file_start(file)
        self.history_ = None
        self._stream = None
        epochs = int(self.epochs)
        seed = self._seed()
        seeds = [_one_vs_one.pair_seed(seed, p) for p in range(len(pairs))]
        # fit's subsets of the large pairs' rows for their passes (`_one_vs_one.pass_positions`).
        keeps = [
            _one_vs_one.pass_positions(rows, budget, pair_seed) if self.polish else None
            for rows, budget, pair_seed in zip(pair_rows, budgets, seeds)
        ]
        passed = [rows if keep is None else len(keep) for rows, keep in zip(pair_rows, keeps)]
        streams = [
            self._new_stream(
                file.width,
                2,
                max(n_passed, 1),
                True,
                epochs,
                budget=budget,
                seed=pair_seed,
            )
            for n_passed, budget, pair_seed in zip(passed, budgets, seeds)
        ]
        n_threads = check_n_jobs(self.n_jobs)
        subsets = any(keep is not None for keep in keeps)
        done = 0
        for epoch in range(1, epochs + 1):
            seen = [0] * len(pairs)
            for X_chunk, labels in file.chunks():
                y_chunk = _class_indices(classes, labels)
                named = None
                if subsets:
                    named = [
                        _one_vs_one.chunk_pass_rows(y_chunk, pair, keep, before)
                        for pair, keep, before in zip(pairs, keeps, seen)
                    ]
                    counts_chunk = np.bincount(y_chunk, minlength=n_classes)
                    seen = [
                        before + int(counts_chunk[a] + counts_chunk[b])
                        for before, (a, b) in zip(seen, pairs)
                    ]
                _budgetsvm.partial_fit_pairs(
                    streams,
                    X_chunk,
                    y_chunk,
                    pairs,
                    sample_weight=None
                    if row_class_weights is None
                    else np.ascontiguousarray(row_class_weights[y_chunk]),
                    average_placement=not self.polish,
                    n_threads=n_threads,
                    pair_rows=named,
                )
                done += len(labels)
                if progress is not None:
                    progress(done, epochs * file.n_rows)
            if self.verbose:
                results = [s.result() for s in streams]
                _print_epoch(
                    dict(
                        epoch=epoch,
                        epochs=epochs,
                        iteration=sum(r["iterations"] for r in results),
                        n_sv=sum(r["coef"].shape[0] for r in results),
                        maintenance_events=sum(r["maintenance_events"] for r in results),
                        seconds=sum(r["seconds"] for r in results),
                    )
                )
        info = [
            dict(
                classes=(int(a), int(b)),
                rows=rows,
                pass_rows=int(n_passed),
                budget=int(budget),
                lambda_=self._lambda_for(max(rows, 1)),
                epochs=epochs,
            )
            for (a, b), rows, n_passed, budget in zip(pairs, pair_rows, passed, budgets)
        ]
        self._set_stream_pairs(streams, info, time.perf_counter() - started)
        self.n_iter_ = epochs
        if self.polish:
            file_classes = np.ascontiguousarray(classes, dtype=np.float64)
            weights = (
                None
                if row_class_weights is None
                else np.ascontiguousarray(row_class_weights, dtype=np.float64)
            )

            def solve(model: BudgetSVC, p: int, b: int, hessian_free_from: Optional[int]) -> bool:
                if pair_rows[p] == 0:
                    return False
                result = model._polish_file(
                    file,
                    pair_rows[p],
                    file_classes,
                    class_weights=weights,
                    pair=pairs[p],
                    hessian_free_from=hessian_free_from,
                )
                model._apply_polish(result)
                return True

            self._polish_each_pair(solve)
        self.fit_stats_["seconds"] = time.perf_counter() - started

    def _file_epoch_done(self, stream: Any, epoch: int, epochs: int) -> None:
        if self.verbose:
            info = stream.result()
            _print_epoch(
                dict(
                    epoch=epoch,
                    epochs=epochs,
                    iteration=info["iterations"],
                    n_sv=info["coef"].shape[0],
                    maintenance_events=info["maintenance_events"],
                    seconds=info["seconds"],
                )
            )

    def _history_recorder(
        self,
        X_native: Any,
        y_index: np.ndarray,
        weights: Optional[np.ndarray],
        eval_set: Optional[Tuple[Any, Any]],
    ) -> Optional[HistoryRecorder]:
        if not self.record_history:
            if eval_set is not None:
                raise ValueError("eval_set is only used with record_history=True")
            return None
        native_eval = None
        if eval_set is not None:
            if not isinstance(eval_set, tuple) or len(eval_set) != 2:
                raise ValueError("eval_set must be a tuple (X_val, y_val)")
            X_val = validate_data(
                self, eval_set[0], accept_sparse="csr", dtype=np.float64, order="C", reset=False
            )
            y_val = np.asarray(eval_set[1])
            if y_val.shape != (X_val.shape[0],):
                raise ValueError(
                    f"eval_set: X_val has {X_val.shape[0]} rows but y_val has shape {y_val.shape}"
                )
            # Labels never seen in training count as errors (index n_classes matches no output).
            pos = np.searchsorted(self.classes_, y_val)
            pos = np.minimum(pos, len(self.classes_) - 1)
            known = self.classes_[pos] == y_val
            native_eval = (to_native(X_val), np.where(known, pos, len(self.classes_)))
        return HistoryRecorder(
            X_native,
            y_index,
            len(self.classes_),
            float(self.C),
            self.gamma_,
            self.solver,
            eval_set=native_eval,
            weights=weights,
            n_threads=check_n_jobs(self.n_jobs),
        )

    @rows_doc(
        "ndarray of shape (n_samples,) or (n_samples, n_classes)",
        "For two classes one value per row, positive for ``classes_[1]``; otherwise one\n"
        "score per class (one-vs-one: its votes plus its summed pair values squashed into\n"
        "(-1/3, 1/3)).",
    )
    @fitted_snapshot
    def decision_function(self, X: Any) -> np.ndarray:
        """Decision values of the budgeted model."""
        values = self._expansion_values(X)
        if getattr(self, "multiclass_", None) == "ovo":
            return _one_vs_one.ovr_scores(values, len(self.classes_))
        return values[:, 0] if values.shape[1] == 1 else values

    @rows_doc()
    @fitted_snapshot
    def predict(self, X: Any) -> np.ndarray:
        """Predicted class labels: the sign of the decision value, or the class of the largest
        score."""
        values = self.decision_function(X)
        if values.ndim == 1:
            return self.classes_[(values > 0).astype(np.intp)]
        return self.classes_[np.argmax(values, axis=1)]

    def _pairwise_decision(self, X: Any) -> np.ndarray:
        """One column per class pair (a, b), a < b, in LIBSVM's order, positive for a: -f for
        two classes, f_a - f_b otherwise (see ``budgetsvm._probability``), the pairs' own
        values for a one-vs-one model."""
        if getattr(self, "multiclass_", None) == "ovo":
            return self._expansion_values(X)
        values = self.decision_function(X)
        if values.ndim == 1:
            return -values[:, None]
        pairs = _probability.class_pairs(values.shape[1])
        a = np.array([p[0] for p in pairs])
        b = np.array([p[1] for p in pairs])
        return values[:, a] - values[:, b]


def _batch_weights(
    sample_weight: Any, X: Any, y_index: np.ndarray, class_weights: np.ndarray
) -> Optional[np.ndarray]:
    """Row weights of a batch: sample weight times class weight; None when all are 1."""
    uniform = bool(np.all(class_weights == 1.0))
    if sample_weight is None and uniform:
        return None
    weights = np.ones(X.shape[0])
    if sample_weight is not None:
        weights = check_sample_weight(sample_weight, X.shape[0])
    if not uniform:
        weights = weights * class_weights[y_index]
    return np.ascontiguousarray(weights)


def _check_classes_unchanged(classes: Any, known: np.ndarray, whose: str) -> None:
    """A later ``partial_fit`` call's ``classes``, when given, must be the known ones (``whose``
    says where they came from)."""
    if classes is not None and not np.array_equal(np.unique(np.asarray(classes)), known):
        raise ValueError(
            f"classes={np.unique(np.asarray(classes)).tolist()!r} differs from {whose}, "
            f"{known.tolist()!r}"
        )


def _class_indices(classes: np.ndarray, y: Any) -> np.ndarray:
    """Index of each label of y in the sorted ``classes``; a label not in it is an error."""
    y = np.asarray(y)
    pos = np.minimum(np.searchsorted(classes, y), len(classes) - 1)
    unknown = classes[pos] != y
    if np.any(unknown):
        raise ValueError(
            f"y contains labels not in classes: {np.unique(y[unknown]).tolist()!r} "
            f"(classes are {classes.tolist()!r})"
        )
    return np.ascontiguousarray(pos, dtype=np.uint32)
