"""scikit-learn estimators backed by the Rust engine."""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from budgetsvm import _budgetsvm
from budgetsvm._validation import check_choice, check_positive, resolve_gamma, to_native

SOLVERS = ("bsgd",)
MAINTENANCE = ("merge", "remove", "project")
MERGE_SEARCHES = ("lookup-wd", "lookup-h", "gss", "gss-precise")


class BudgetSVC(ClassifierMixin, BaseEstimator):
    """Gaussian-kernel SVM whose model keeps at most ``budget`` support vectors.

    Trained by budgeted stochastic gradient descent (BSGD: Pegasos with a budget, Wang, Crammer
    & Vucetic 2012), so training and prediction cost O(budget) per example however large the
    data. Two classes give the binary hinge-loss SVM without bias; more classes the
    Crammer-Singer multi-class SVM. When a step would exceed the budget, the support vector with
    the smallest coefficient is merged with its best partner (default), removed or projected.

    Parameters
    ----------
    C : float, default=1.0
        Regularisation, as in LIBSVM: lambda = 1 / (n_samples * C).
    gamma : {'scale', 'auto'} or float, default='scale'
        Kernel width in exp(-gamma ||x - x'||^2); 'scale' is 1 / (n_features * X.var()).
    budget : int, default=100
        Maximum number of support vectors.
    solver : {'bsgd'}, default='bsgd'
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
        the last iterate is returned (removal discards SVs with their averages).
    random_state : int, RandomState or None, default=None
        Seed of the example order; an int gives the same model on every platform.
    verbose : bool, default=False
        Print one line of progress per epoch.

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
        maintenance vs total, mean weight degradation per event.

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

    def _seed(self) -> int:
        if isinstance(self.random_state, (int, np.integer)) and not isinstance(
            self.random_state, bool
        ):
            if self.random_state < 0:
                raise ValueError(f"random_state must be non-negative, got {self.random_state}")
            return int(self.random_state)
        return int(check_random_state(self.random_state).randint(0, 2**31 - 1))

    def fit(self, X: Any, y: Any, *, _compare_with: Optional[str] = None) -> BudgetSVC:
        """Train on X (dense or sparse, n_samples x n_features) and labels y."""
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
        callback = _print_epoch if self.verbose else None
        result: Dict[str, Any] = _budgetsvm.fit_bsgd(
            to_native(X),
            np.ascontiguousarray(y_index, dtype=np.uint32),
            len(self.classes_),
            c=float(self.C),
            gamma=self.gamma_,
            budget=int(self.budget),
            epochs=int(self.epochs),
            maintenance=self.maintenance,
            merge=self.merge,
            seed=self._seed(),
            average=bool(self.average),
            compare_with=_compare_with,
            callback=callback,
        )
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
