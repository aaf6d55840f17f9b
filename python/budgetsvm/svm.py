"""scikit-learn estimators backed by the Rust engine."""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional, Tuple

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from budgetsvm import _budgetsvm
from budgetsvm._history import HistoryRecorder
from budgetsvm._validation import check_choice, check_positive, resolve_gamma, to_native

SOLVERS = ("bsgd", "bsca")
MAINTENANCE = ("merge", "remove", "project")
MERGE_SEARCHES = ("lookup-wd", "lookup-h", "gss", "gss-precise")


class BudgetSVC(ClassifierMixin, BaseEstimator):
    """Gaussian-kernel SVM whose model keeps at most ``budget`` support vectors.

    Trained by budgeted stochastic gradient descent (``solver='bsgd'``: Pegasos with a budget,
    Wang, Crammer & Vucetic 2012) or budgeted stochastic coordinate ascent in the dual
    (``solver='bsca'``: Qaadan, Schüler & Glasmachers 2019), so training and prediction cost
    O(budget) per example however large the data. Two classes give the binary hinge-loss SVM
    without bias. With more classes BSGD trains the Crammer-Singer multi-class SVM and BSCA one
    binary SVM per class (one-vs-rest, the classes in parallel), sharing one set of support
    vectors. When a step would exceed the budget, the support vector with the smallest
    coefficient is merged with its best partner (default), removed or projected.

    Parameters
    ----------
    C : float, default=1.0
        Regularisation, as in LIBSVM: lambda = 1 / (n_samples * C).
    gamma : {'scale', 'auto'} or float, default='scale'
        Kernel width in exp(-gamma ||x - x'||^2); 'scale' is 1 / (n_features * X.var()).
    budget : int, default=100
        Maximum number of support vectors: of the whole model for BSGD (multi-class SVs carry one
        coefficient per class), per class for BSCA with more than two classes (one-vs-rest, so
        up to n_classes * budget SVs; each class's problem gets the full budget).
    solver : {'bsgd', 'bsca'}, default='bsgd'
        BSGD (primal SGD) or BSCA (dual coordinate ascent, one dual variable in [0, C] per
        training example). BSCA is stable from epoch to epoch at moderate C; at large C with a
        small budget its budgeted model drifts (docs/bsca_paper002.md measures both).
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
        the last iterate is returned (removal discards SVs with their averages). BSGD only:
        BSCA's dual iterates do not oscillate and are returned as they are.
    random_state : int, RandomState or None, default=None
        Seed of the example order; an int gives the same model on every platform.
    verbose : bool, default=False
        Print one line of progress per epoch.
    record_history : bool, default=False
        Record per-epoch traces in ``history_`` (objectives, accuracy on the training data and
        on ``fit``'s ``eval_set``, merge fraction, time). Costs one pass of predictions over the
        data per epoch (plus the exact dual for BSCA on up to 10,000 rows), not counted in the
        reported seconds; free when off.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    support_vectors_ : ndarray of shape (n_SV, n_features)
    dual_coef_ : ndarray of shape (1, n_SV) for two classes, (n_classes, n_SV) otherwise
        Coefficient of each support vector in the decision function (per class).
    gamma_ : float
        The kernel width used.
    n_features_in_ : int
    n_iter_ : int
        Epochs run.
    fit_stats_ : dict
        Iterations, insertions, budget maintenance events and their frequency, time in
        maintenance vs total, mean weight degradation per event. BSCA adds ``updates`` (steps
        that changed a dual variable) and ``dropped_svs`` (SVs whose coefficient returned to 0);
        its iterations count the steps of all one-vs-rest problems.
    history_ : dict of lists or None
        With ``record_history=True``, one entry per epoch under the keys ``epoch``, ``seconds``
        (training time so far), ``primal`` (C-form primal objective 1/2 |w|^2 + C sum of hinge
        losses of the budgeted model, |w|^2 = beta^T K beta), ``dual`` (BSCA's dual objective
        sum(alpha) - 1/2 alpha^T Q alpha, NaN for BSGD and above 10,000 rows, where it would
        cost O(n^2) kernel values), ``train_accuracy``, ``val_accuracy`` (NaN without
        ``eval_set``), ``maintenance_fraction`` (share of the epoch's steps that triggered
        budget maintenance) and ``n_sv``. For BSGD with ``average=True`` the entries before the
        last epoch describe the last iterate, the last one the returned average. None when off.

    Examples
    --------
    >>> import numpy as np
    >>> from budgetsvm import BudgetSVC
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(2000, 2))
    >>> y = (X[:, 0] * X[:, 1] > 0).astype(int)
    >>> clf = BudgetSVC(C=10, gamma=2.0, budget=50, epochs=3, random_state=0).fit(X, y)
    >>> clf.support_vectors_.shape[0] <= 50
    True
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    def __init__(
        self,
        C: float = 1.0,
        gamma: Any = "scale",
        budget: int = 100,
        solver: str = "bsgd",
        maintenance: str = "merge",
        merge: str = "lookup-wd",
        epochs: int = 5,
        average: bool = True,
        random_state: Any = None,
        verbose: bool = False,
        record_history: bool = False,
    ) -> None:
        self.C = C
        self.gamma = gamma
        self.budget = budget
        self.solver = solver
        self.maintenance = maintenance
        self.merge = merge
        self.epochs = epochs
        self.average = average
        self.random_state = random_state
        self.verbose = verbose
        self.record_history = record_history

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _check_params(self) -> None:
        check_positive("C", self.C)
        check_positive("budget", self.budget, integer=True, minimum=2)
        check_positive("epochs", self.epochs, integer=True, minimum=1)
        check_choice("solver", self.solver, SOLVERS)
        check_choice("maintenance", self.maintenance, MAINTENANCE)
        check_choice("merge", self.merge, MERGE_SEARCHES)
        check_choice("average", self.average, (True, False))
        check_choice("record_history", self.record_history, (True, False))

    def _seed(self) -> int:
        if isinstance(self.random_state, (int, np.integer)) and not isinstance(
            self.random_state, bool
        ):
            if self.random_state < 0:
                raise ValueError(f"random_state must be non-negative, got {self.random_state}")
            return int(self.random_state)
        return int(check_random_state(self.random_state).randint(0, 2**31 - 1))

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        eval_set: Optional[Tuple[Any, Any]] = None,
        _compare_with: Optional[str] = None,
    ) -> BudgetSVC:
        """Train on X (dense or sparse, n_samples x n_features) and labels y.

        ``eval_set=(X_val, y_val)`` adds validation accuracy per epoch to ``history_`` (needs
        ``record_history=True``).
        """
        self._check_params()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, order="C")
        check_classification_targets(y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                "BudgetSVC needs samples of at least two classes; the data contain only one class: "
                f"{self.classes_[0]!r}"
            )
        self.gamma_ = resolve_gamma(self.gamma, X)
        X_native = to_native(X)
        y_index = np.ascontiguousarray(y_index, dtype=np.uint32)
        recorder = self._history_recorder(X_native, y_index, eval_set)
        common: Dict[str, Any] = dict(
            c=float(self.C),
            gamma=self.gamma_,
            budget=int(self.budget),
            epochs=int(self.epochs),
            maintenance=self.maintenance,
            merge=self.merge,
            seed=self._seed(),
            compare_with=_compare_with,
            callback=_print_epoch if self.verbose else None,
            observer=recorder,
        )
        n_classes = len(self.classes_)
        if self.solver == "bsca":
            result = _budgetsvm.fit_bsca(X_native, y_index, n_classes, **common)
        else:
            result = _budgetsvm.fit_bsgd(
                X_native, y_index, n_classes, average=bool(self.average), **common
            )
        self.history_ = recorder.history if recorder is not None else None
        self.support_vectors_ = result.pop("support_vectors")
        self.dual_coef_ = np.ascontiguousarray(result.pop("coef").T)
        self.n_iter_ = result["epochs"]
        events = result["maintenance_events"]
        result["mean_weight_degradation"] = (
            result["total_weight_degradation"] / events if events else 0.0
        )
        if _compare_with is not None:
            # NaN when no merge was compared (no merges, or multi-class, where GSS is the only search).
            compared = result["compared_merges"]
            result["merge_agreement"] = (
                result["agreeing_merges"] / compared if compared else float("nan")
            )
        self.fit_stats_ = result
        return self

    def _history_recorder(
        self, X_native: Any, y_index: np.ndarray, eval_set: Optional[Tuple[Any, Any]]
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
        )

    def decision_function(self, X: Any) -> np.ndarray:
        """Decision values: shape (n_samples,) for two classes (positive means ``classes_[1]``),
        (n_samples, n_classes) otherwise."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, order="C", reset=False)
        values = _budgetsvm.decision_function(
            self.support_vectors_,
            np.ascontiguousarray(self.dual_coef_.T),
            self.gamma_,
            to_native(X),
        )
        return values[:, 0] if values.shape[1] == 1 else values

    def predict(self, X: Any) -> np.ndarray:
        """Predicted class labels."""
        values = self.decision_function(X)
        if values.ndim == 1:
            return self.classes_[(values > 0).astype(np.intp)]
        return self.classes_[np.argmax(values, axis=1)]


def _print_epoch(info: Dict[str, Any]) -> None:
    print(
        f"[budgetsvm] epoch {info['epoch']}/{info['epochs']}: {info['iteration']} steps, "
        f"{info['n_sv']} SVs, {info['maintenance_events']} budget maintenance events, "
        f"{info['seconds']:.2f} s",
        file=sys.stdout,
        flush=True,
    )
