"""What the exact kernel machines share (``KernelSVC``, ``KernelSVR``, ``KernelOneClassSVM``,
the nu machines): the kernel and solver parameters and their checks, the call of the native
solver (one dual problem for all: ``_budgetsvm.fit_exact``), a precomputed kernel's handling,
and the decision values of a kernel expansion. The bases, from the most shared:
``ExactKernelMachine``; ``SingleOutputMachine`` (one decision function: regression, one-class);
``ExactClassifier`` (``KernelSVC``, ``KernelNuSVC``) and ``ExactRegressor`` (``KernelSVR``,
``KernelNuSVR``). A new exact estimator is a short subclass: its problem's parameters, its
``fit`` and the attributes scikit-learn gives it.
"""

from __future__ import annotations

import copy
import math
import numbers
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import _ovr_decision_function
from sklearn.utils.validation import (
    _num_samples,
    check_consistent_length,
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from budgetsvm import _budgetsvm
from budgetsvm._docstrings import rows_doc
from budgetsvm._probability import ProbabilityMixin
from budgetsvm._validation import (
    FitGuardedParams,
    TrainingRows,
    check_choice,
    check_integer,
    check_n_jobs,
    check_nonnegative,
    check_positive,
    fit_guard,
    fitted_snapshot,
    is_finite,
    resolve_gamma,
    shown,
    to_native,
    training_rows,
    weighted_rows,
)
from budgetsvm.modelfile import ModelFileMixin

KERNELS = ("rbf", "linear", "poly", "sigmoid", "precomputed")
#: ``_validate_fit``'s "no y given" (None is a y, which supervised estimators reject).
_NO_Y: Any = object()
SOLVERS = ("alfpgm", "smo")
#: ``decision_function_shape``'s values (a classifier's).
SHAPES = ("ovr", "ovo")
#: The largest polynomial degree (the engine's bound).
MAX_DEGREE = 64
_Classifier = TypeVar("_Classifier", bound="ExactClassifier")
_Regressor = TypeVar("_Regressor", bound="ExactRegressor")


def check_c(value: Any) -> float:
    """C of an exact machine: a number > 0; inf is the hard margin (as scikit-learn's SVMs), and
    so is an integer beyond float64's range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"C must be a number, got {shown(value)}")
    if not is_finite(value) and value > 0:
        return math.inf
    if value != value or value <= 0:  # NaN (numpy cannot take every Python int)
        raise ValueError(f"C must be > 0 (inf for a hard margin), got {shown(value)}")
    return float(value)


def check_finite_c(value: Any) -> float:
    """C of nu-SVR: a finite number > 0. Its dual fixes sum(a + a*) = C nu sum(w), so an
    infinite C leaves no problem to solve (scikit-learn's NuSVR accepts inf and fails)."""
    c = check_c(value)
    if not np.isfinite(c):
        raise ValueError(
            "C must be finite for nu-SVR (its dual fixes sum(a + a*) = C nu n, which inf makes "
            "infinite); for a nearly hard margin use a large finite C, e.g. 1e6, got inf"
        )
    return c


def check_nu(value: Any) -> float:
    """nu of the nu formulations: a number in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"nu must be a number in (0, 1], got {shown(value)}")
    if not (is_finite(value) and 0 < value <= 1):
        raise ValueError(f"nu must be in (0, 1], got {shown(value)}")
    return float(value)


def check_epsilon(value: Any) -> float:
    check_nonnegative("epsilon", value)
    return float(value)


#: Each problem's own parameters, in the order they are checked: the estimator's attribute (the
#: engine's keyword is its lower case) and its check.
PROBLEM_PARAMS: Dict[str, Tuple[Tuple[str, Callable[[Any], float]], ...]] = {
    "svc": (("C", check_c),),
    "nu_svc": (("nu", check_nu),),
    "svr": (("epsilon", check_epsilon), ("C", check_c)),
    "nu_svr": (("C", check_finite_c), ("nu", check_nu)),
    "one_class": (("nu", check_nu),),
}


@dataclass(kw_only=True, eq=False, repr=False)
class ExactKernelMachine(FitGuardedParams, ModelFileMixin, BaseEstimator):
    """Base of the exact kernel estimators, with the kernel's and the solver's parameters.
    Subclasses set ``_problem`` ('svc', 'nu_svc', 'svr', 'nu_svr' or 'one_class') and add
    their problem's parameters.

    Every estimator declares its parameters as dataclass fields, keyword-only as scikit-learn's
    (``SVC(*, C=1.0, ...)``): each is written once with its type and default, and the generated
    ``__init__`` stores the arguments unchanged, as ``get_params`` and ``clone`` expect."""

    kernel: Union[str, Callable[..., Any]] = "rbf"
    degree: int = 3
    gamma: Any = "scale"
    coef0: float = 0.0
    shrinking: bool = True
    tol: float = 1e-3
    cache_size: float = 200
    verbose: bool = False
    max_iter: int = -1
    solver: str = "alfpgm"
    n_jobs: Optional[int] = None
    solver_options: Optional[Dict[str, Any]] = None

    _problem = ""
    #: ALFPGM's ``n_pairs`` when ``solver_options`` does not give it.
    _default_pairs = 50

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self.kernel != "precomputed"
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags

    def _from_gram(self) -> bool:
        """Whether the engine reads kernel values instead of rows: a precomputed kernel, or a
        callable one (its values for the training rows are computed here, then solved as a
        precomputed kernel; predict calls it against the support rows only)."""
        return callable(self.kernel) or self.kernel == "precomputed"

    # Parameters.

    def _check_params(self) -> Dict[str, Any]:
        """Every parameter checked (before any data is read): the native solver's keyword
        arguments, the problem's (``_problem_params``) and the solver's."""
        problem = self._problem_params()
        solver = self._solver_params()
        self._check_kernel()
        return {**problem, **solver}

    def _problem_params(self) -> Dict[str, Any]:
        """The problem's own parameters (C, epsilon, nu), checked, under the engine's names."""
        problem = PROBLEM_PARAMS[self._problem]
        return {name.lower(): check(getattr(self, name)) for name, check in problem}

    def _solver_params(self) -> Dict[str, Any]:
        """The native solver's keyword arguments, every value checked."""
        check_positive("tol", self.tol)
        check_positive("cache_size", self.cache_size)
        check_choice("solver", self.solver, SOLVERS)
        check_choice("verbose", self.verbose, (True, False))
        if not isinstance(self.shrinking, (bool, np.bool_)):
            raise ValueError(f"shrinking must be True or False, got {self.shrinking!r}")
        check_integer("max_iter", self.max_iter, -1)
        if self.max_iter == 0:
            raise ValueError("max_iter must be -1 (the solver's default) or >= 1, got 0")
        return dict(
            solver=self.solver,
            shrinking=bool(self.shrinking),
            tol=float(self.tol),
            cache_size=float(self.cache_size),
            max_iter=0 if self.max_iter == -1 else int(self.max_iter),
            n_threads=check_n_jobs(self.n_jobs),
            **solver_options(self.solver, self.solver_options, n_pairs=self._default_pairs),
        )

    def _check_kernel(self) -> None:
        if not callable(self.kernel):
            check_choice("kernel", self.kernel, KERNELS)
        check_integer("degree", self.degree, 0)
        if self.degree > MAX_DEGREE:
            raise ValueError(f"degree must be at most {MAX_DEGREE}, got {shown(self.degree)}")
        if isinstance(self.coef0, bool) or not isinstance(self.coef0, numbers.Real):
            raise ValueError(f"coef0 must be a number, got {shown(self.coef0)}")
        if not is_finite(self.coef0):
            raise ValueError(f"coef0 must be finite, got {shown(self.coef0)}")
        if not isinstance(self.gamma, str):
            check_positive("gamma", self.gamma)

    def _kernel_params(self) -> Dict[str, Any]:
        """The fitted kernel as the native calls take it."""
        kernel = "precomputed" if callable(self.kernel) else self.kernel
        return dict(kernel=kernel, gamma=self.gamma_, coef0=float(self.coef0), degree=int(self.degree))

    # Fitting.

    def _validate_fit(self, X: Any, y: Any = _NO_Y, **kwargs: Any) -> Any:
        """Validated X (and y): CSR or C-contiguous float64; a precomputed kernel dense and
        square; for a callable kernel its matrix over the rows X (which may be any sequence it
        takes). Sets ``shape_fit_`` and ``gamma_``."""
        self._check_kernel()
        if callable(self.kernel):
            return self._validate_fit_callable(X, y)
        precomputed = self.kernel == "precomputed"
        if precomputed and isinstance(X, KernelFunctionRows):
            # A callable kernel's matrix over a cross-validation fold's rows: kept unformed.
            if y is not _NO_Y:
                check_consistent_length(X, y)
                y = column_or_1d(y, warn=True)
            self.shape_fit_ = X.shape
            self.n_features_in_ = X.shape[1]
            self.gamma_ = 1.0
            return X if y is _NO_Y else (X, y)
        if precomputed and sp.issparse(X):
            raise TypeError(
                "a precomputed kernel must be a dense array (n_samples x n_samples), not sparse"
            )
        sparse = False if precomputed else "csr"
        # A Gram matrix is n^2 values: the engine checks them (in parallel, one read) instead.
        finite = {"ensure_all_finite": False} if precomputed else {}
        if y is _NO_Y:
            X = validate_data(self, X, accept_sparse=sparse, dtype=np.float64, order="C", **finite)
            out: Any = X
        else:
            X, y = validate_data(
                self, X, y, accept_sparse=sparse, dtype=np.float64, order="C", **finite, **kwargs
            )
            out = (X, y)
        if precomputed and X.shape[0] != X.shape[1]:
            if not np.all(np.isfinite(X)):
                # The engine checks a square Gram matrix; this one never reaches it.
                raise ValueError("the precomputed kernel contains NaN or infinity")
            raise ValueError(
                f"a precomputed kernel must be a square matrix (n_samples x n_samples); got "
                f"{X.shape[0]} x {X.shape[1]}"
            )
        self.shape_fit_ = X.shape
        if precomputed or self.kernel == "linear":
            # Unused by these kernels; resolved as scikit-learn does for the attribute.
            self.gamma_ = 1.0 if precomputed else _gamma_or_one(self.gamma, X)
        else:
            self.gamma_ = resolve_gamma(self.gamma, X)
        return out

    def _validate_fit_callable(self, X: Any, y: Any) -> Any:
        """A callable kernel's matrix over the training rows (as scikit-learn, which passes X to
        the function as given), checked, once it is known to fit ``cache_size``; the rows are
        kept until the support is known (``_keep_support_rows``)."""
        if y is not _NO_Y:
            check_consistent_length(X, y)
            y = column_or_1d(y, warn=True)
        n = _num_samples(X)
        if n == 0:
            raise ValueError("no training samples (0 rows)")
        need = 8.0 * n * n
        gram: Any
        if need <= float(self.cache_size) * (1 << 20):
            gram = self._call_kernel(X, X, n, n)
        else:
            # Beyond the cache: the engine asks for the rows its solvers need, a block of rows
            # at a time, and keeps cache_size of them (probability's folds as well; their
            # held-out rows are computed against the support rows only).
            gram = KernelFunctionRows(self._call_kernel, X, np.arange(n), np.arange(n))
        self.__dict__.pop("n_features_in_", None)
        self.shape_fit_ = tuple(getattr(X, "shape", (n,)))
        self.gamma_ = 1.0
        self._fit_rows_given = X
        return gram if y is _NO_Y else (gram, y)

    def _call_kernel(self, A: Any, B: Any, n_a: int, n_b: int) -> np.ndarray:
        """The callable kernel's values k(A, B), checked: a finite n_a x n_b array."""
        values = self.kernel(A, B)
        if sp.issparse(values):
            values = values.toarray()
        try:
            values = np.array(values, dtype=np.float64, order="C")
        except (TypeError, ValueError) as e:
            raise ValueError(f"the kernel function must return numbers: {e}") from None
        if values.shape != (n_a, n_b):
            raise ValueError(
                f"the kernel function returned shape {values.shape} for {n_a} and {n_b} rows; "
                f"expected ({n_a}, {n_b})"
            )
        if not np.all(np.isfinite(values)):
            raise ValueError("the kernel function returned NaN or infinity")
        return values

    def _keep_support_rows(self) -> None:
        """After a fit with a callable kernel: the training rows of the support vectors, what
        predict calls the kernel against (scikit-learn keeps all training rows)."""
        rows = self.__dict__.pop("_fit_rows_given", None)
        if callable(self.kernel) and rows is not None:
            self._support_rows = _take_rows(rows, self.support_)

    def _fit_native(
        self, X: Any, target: Any, weights: Optional[np.ndarray], **problem: Any
    ) -> List[Dict[str, Any]]:
        """Runs the native solver on validated X with the problem's and the solver's parameters
        (``_solver_params()``, checked before the data); one result dict per problem solved."""
        solver = self._solver_for(X)
        problem = dict(problem, solver=solver)
        if isinstance(X, KernelFunctionRows):
            # Rows of no features; the kernel's rows come from the function on request.
            problem = dict(problem, kernel_rows=X.rows, diagonal=X.diagonal())
            X = np.empty((X.shape[0], 0))
        results: List[Dict[str, Any]] = _budgetsvm.fit_exact(
            to_native(X),
            target,
            problem=self._problem,
            report_every=1.0 if self.verbose else None,
            callback=_print_progress if self.verbose else None,
            sample_weight=weights,
            **self._kernel_params(),
            **problem,
        )
        if not all(r["converged"] for r in results):
            cap = "the solver's default" if self.max_iter == -1 else self.max_iter
            # scikit-learn's words first (code matches them), then what we know.
            warnings.warn(
                f"Solver terminated early (max_iter={cap}).  Consider pre-processing your data "
                f"with StandardScaler or MinMaxScaler. ({type(self).__name__} ({self.solver}) "
                f"stopped at the iteration cap before reaching tol={self.tol}: KKT gaps "
                f"{[round(r['gap'], 6) for r in results]}; raise max_iter or tol.)",
                ConvergenceWarning,
                stacklevel=4,
            )
        for r in results:
            r["solver"] = solver
        return results

    def _solver_for(self, X: Any) -> str:
        """The solver that runs: ``solver``, except that ALFPGM hands a kernel that is not
        positive semi-definite to SMO. Its dual is then not convex, and the model depends on
        the path taken to a stationary point: SMO's path is LIBSVM's, so the model is
        scikit-learn's, where ALFPGM's many-pair steps reach another one (a sigmoid kernel:
        80% of KernelSVC's predictions and nu-SVR's values 100 apart). Not PSD: the sigmoid
        kernel, the polynomial one with coef0 < 0, and a precomputed or callable kernel whose
        matrix over up to 256 of the rows (evenly spaced) is not symmetric or has an
        eigenvalue below -1e-8 times its largest."""
        if self.solver != "alfpgm":
            return self.solver
        if self.kernel == "sigmoid" or (self.kernel == "poly" and float(self.coef0) < 0):
            return "smo"
        if not self._from_gram():
            return self.solver
        n = X.shape[0]
        # 256 rows: one block of what a kernel function is asked for at a time.
        sample = np.unique(np.linspace(0, n - 1, min(n, 256)).astype(np.intp))
        block = np.asarray(X[np.ix_(sample, sample)], dtype=np.float64)
        if not np.allclose(block, block.T, rtol=1e-10, atol=1e-12 * np.abs(block).max()):
            return "smo"
        eigenvalues = np.linalg.eigvalsh(block)
        scale = float(np.abs(eigenvalues).max())
        return "smo" if eigenvalues[0] < -1e-8 * scale else self.solver

    def _support_vectors(self, X: Any, support: np.ndarray) -> Any:
        """The rows ``support`` of X as ``support_vectors_``: CSR for sparse input (so nothing of
        size n_features is made per vector), empty for a precomputed or callable kernel (as
        SVC)."""
        if self._from_gram():
            return np.empty((0, 0))
        sv = X[support]
        if sp.issparse(sv):
            sv = sp.csr_matrix(sv)
            sv.sort_indices()
            return sv
        return np.ascontiguousarray(sv)

    def _set_dual_coef(self, dual_coef: np.ndarray) -> None:
        """``dual_coef_`` as scikit-learn's: a ``scipy.sparse.csr_matrix`` after a sparse fit
        (as ``support_vectors_``), else the dense array. Non-finite coefficients (a C or a
        feature scale beyond float64) are an error here, not a model that cannot predict."""
        if not np.all(np.isfinite(dual_coef)):
            raise ValueError(
                "The dual coefficients or intercepts are not finite. The input data may "
                "contain values too large for the kernel; scale the features."
            )
        if sp.issparse(self.support_vectors_):
            self.dual_coef_ = sp.csr_matrix(dual_coef)
        else:
            self.dual_coef_ = dual_coef

    def _dense_dual_coef(self) -> np.ndarray:
        """``dual_coef_`` as a dense array (it is sparse after a sparse fit)."""
        if sp.issparse(self.dual_coef_):
            return np.asarray(self.dual_coef_.toarray())
        return np.asarray(self.dual_coef_)

    @staticmethod
    def _fit_stats(results: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {
            "gap": [r["gap"] for r in results],
            "converged": [r["converged"] for r in results],
            "fallback_steps": int(sum(r["fallback_steps"] for r in results)),
            "inner_iterations": int(sum(r["inner_iterations"] for r in results)),
            "working_sets": int(sum(r["working_sets"] for r in results)),
            "cache_hits": int(sum(r["cache_hits"] for r in results)),
            "cache_misses": int(sum(r["cache_misses"] for r in results)),
            "kernel_seconds": float(sum(r["kernel_seconds"] for r in results)),
            "kernel_values": int(sum(r["kernel_values"] for r in results)),
            "row_precision": results[0]["row_precision"] if results else "float32",
            "min_active": [r["min_active"] for r in results],
            "strides": int(sum(r["strides"] for r in results)),
            "r": [r["r"] for r in results],
            "seconds": float(sum(r["seconds"] for r in results)),
            # The solver that ran (``_solver_for``: SMO for a kernel that is not PSD).
            "solver": results[0]["solver"] if results else None,
        }

    # Prediction.

    def _validate_predict(self, X: Any) -> Any:
        check_is_fitted(self)
        if callable(self.kernel):
            # The kernel against the support rows only: (n_samples, n_SV).
            n = _num_samples(X)
            if len(self.support_) == 0:
                return np.zeros((n, 0))
            return self._call_kernel(X, self._support_rows, n, len(self.support_))
        if self.kernel == "precomputed":
            if isinstance(X, KernelFunctionRows):
                # A callable kernel's held-out rows against a fold's training rows: only the
                # support columns are computed (``_expansion``).
                if X.shape[1] != self.n_features_in_:
                    raise ValueError(f"{X.shape[1]} kernel columns; expected {self.n_features_in_}")
                return X
            if sp.issparse(X):
                raise TypeError("a precomputed kernel must be a dense array, not sparse")
            # n_features_in_ is the number of training rows: validate_data checks the width.
            return validate_data(self, X, dtype=np.float64, order="C", reset=False)
        return validate_data(
            self, X, accept_sparse="csr", dtype=np.float64, order="C", reset=False
        )

    def _expansion(
        self,
        X: Any,
        coef: np.ndarray,
        intercept: np.ndarray,
        class_counts: Optional[np.ndarray] = None,
    ) -> np.ndarray:
        """sum_j coef_j k(s_j, x) + intercept for validated rows X, (n_samples, n_out): kernel
        blocks against the support vectors, or the given kernel values X[:, support_]."""
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        counts = None if class_counts is None else class_counts.astype(np.int64)
        intercept = np.ascontiguousarray(intercept, dtype=np.float64)
        n_threads = check_n_jobs(self.n_jobs)
        if self._from_gram():
            # A callable kernel's values are already those against the support rows.
            columns = X if callable(self.kernel) else X[:, self.support_]
            return _budgetsvm.decision_from_kernel(
                np.ascontiguousarray(columns),
                coef,
                n_threads=n_threads,
                class_counts=counts,
                intercept=intercept,
            )
        if len(self.support_) == 0:
            return np.zeros((X.shape[0], len(intercept))) + intercept
        return _budgetsvm.decision_function(
            to_native(self.support_vectors_),
            coef,
            self.gamma_,
            to_native(X),
            n_threads=n_threads,
            class_counts=counts,
            intercept=intercept,
            kernel=self.kernel,
            coef0=float(self.coef0),
            degree=int(self.degree),
        )

    @property
    @fitted_snapshot
    def coef_(self) -> Any:
        """Weights in the input space, ``dual_coef_ @ support_vectors_`` (linear kernel only,
        as scikit-learn's)."""
        if self.kernel != "linear":
            raise AttributeError("coef_ is only available when using a linear kernel")
        check_is_fitted(self)
        coef = self._linear_coef()
        if sp.issparse(coef):
            coef = sp.csr_matrix(coef)
            coef.data.flags.writeable = False
            return coef
        # Read-only, as scikit-learn's: it is computed, not a parameter to edit.
        coef = np.asarray(coef)
        coef.flags.writeable = False
        return coef

    def _linear_coef(self) -> Any:
        return _times_vectors(self._dense_dual_coef(), self.support_vectors_)


class SingleOutputMachine(ExactKernelMachine):
    """An exact machine with one decision function (SVR, one-class): the attributes
    scikit-learn's SVR and OneClassSVM have, from the one problem's solution."""

    def _fit_single(self, X: Any, target: Any, sample_weight: Any, **problem: Any) -> None:
        """Fits validated X (and target); rows of sample weight 0 are left out."""
        weights, kept = weighted_rows(sample_weight, X.shape[0])
        if kept is not None:
            X = X[np.ix_(kept, kept)] if self._from_gram() else X[kept]
            if target is not None:
                target = target[kept]
        [r] = self._fit_native(X, target, weights, **problem)
        self._set_single(X, kept, r)

    def _fit_single_path(
        self, X: Any, target: Any, sample_weight: Any, cs: Any, **problem: Any
    ) -> List[Any]:
        """``_fit_single`` for every C of ``cs`` (fitted copies, in that order): the Cs solved
        in increasing order over one kernel-row cache, each from the last one's solution
        (``fit_exact(cs=...)``)."""
        weights, kept = weighted_rows(sample_weight, X.shape[0])
        if kept is not None:
            X, target = X[kept], target[kept]
        order = sorted(set(float(c) for c in cs))
        results = self._fit_native(X, target, weights, **dict(problem, cs=order))
        models = {}
        for c, r in zip(order, results):
            model = copy.copy(self)
            model.C = c
            model._set_single(X, kept, r)
            models[c] = model
        return [models[float(c)] for c in cs]

    def _set_single(self, X: Any, kept: Optional[np.ndarray], r: Dict[str, Any]) -> None:
        """The fitted attributes from the problem's solution ``r`` over the rows ``X`` (the
        rows of the training set ``kept``, or all)."""
        support = r["support"]
        self.support_vectors_ = self._support_vectors(X, support)
        self.support_ = (support if kept is None else kept[support]).astype(np.int32)
        self._keep_support_rows()
        if not np.isfinite(r["rho"]):
            raise ValueError(
                "The dual coefficients or intercepts are not finite: the intercept is "
                f"{-r['rho']} ({self._infinite_intercept_hint()})"
            )
        self._set_dual_coef(r["coef"].reshape(1, -1))
        self.intercept_ = np.array([-r["rho"]])
        self.n_support_ = np.array([len(support)], dtype=np.int32)
        self.n_iter_ = int(r["iterations"])
        self.dual_objective_ = float(-r["objective"])
        self.fit_status_ = 0 if r["converged"] else 1
        self.fit_stats_ = self._fit_stats([r])

    def _infinite_intercept_hint(self) -> str:
        """What makes this problem's intercept infinite, for the error saying so."""
        return "the data may contain values too large for the kernel; scale the features"

    def _decision(self, X: Any) -> np.ndarray:
        """sum_j dual_coef_j k(s_j, x) + intercept_ for every row, shape (n_samples,)."""
        X = self._validate_predict(X)
        return self._expansion(X, self._dense_dual_coef().T, self.intercept_)[:, 0]


@dataclass(kw_only=True, eq=False, repr=False)
class ExactClassifier(ProbabilityMixin, ClassifierMixin, ExactKernelMachine):
    """What ``KernelSVC`` and ``KernelNuSVC`` share: the classifier's parameters, the
    one-vs-one fit over the class pairs, probabilities and the decision rules. A subclass adds
    its problem's parameter (C or nu) and names its problem."""

    decision_function_shape: str = "ovr"
    break_ties: bool = False
    class_weight: Any = None
    probability: bool = False
    random_state: Any = None

    def _problem_params(self) -> Dict[str, Any]:
        self._check_classifier_params()
        return super()._problem_params()

    def _check_classifier_params(self) -> None:
        """The checks of what SVC and NuSVC share (the output's shape, probabilities, ties)."""
        check_choice("decision_function_shape", self.decision_function_shape, SHAPES)
        check_choice("probability", self.probability, (True, False))
        check_choice("break_ties", self.break_ties, (True, False))

    def _training_rows(self, X: Any, y: Any, sample_weight: Any) -> TrainingRows:
        """The rows, classes and weights the problem is built from (C-SVC: sample weight times
        class weight scales each row's C)."""
        return training_rows(type(self).__name__, X, y, sample_weight, self.class_weight)

    @fit_guard
    def fit(self: _Classifier, X: Any, y: Any, sample_weight: Any = None) -> _Classifier:
        """Train on X and labels y.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows, dense or sparse.
        y : array-like of shape (n_samples,)
            Class labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Weighs each row as SVC and NuSVC do (C-SVC: multiplies its C; nu-SVC: its bound
            and its share of nu); rows of weight <= 0 are left out.

        Returns
        -------
        self : KernelSVC or KernelNuSVC
        """
        native_params = self._check_params()
        X, y = self._validate_fit(X, y)
        rows = self._training_rows(X, y, sample_weight)
        if self._from_gram() and rows.kept is not None:
            # Rows of weight 0 leave the Gram matrix's columns too.
            rows = rows._replace(X=rows.X[:, rows.kept])
        self.classes_ = rows.classes
        self.class_weight_ = rows.class_weights
        self._fit_rows(rows, native_params)
        if rows.kept is not None:
            self.support_ = rows.kept[self.support_].astype(np.int32)
        self._keep_support_rows()
        if self.probability:
            seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
            # The folds train on blocks of the kernel matrix this fit computed.
            gram = {"kernel": "precomputed"} if callable(self.kernel) else {}
            self._fit_probability(rows, seed, **gram)
        return self

    def _fit_path(self: _Classifier, X: Any, y: Any, sample_weight: Any, cs: Any) -> List[_Classifier]:
        """Fitted copies of this estimator, one per C of ``cs`` (in that order), each the
        model ``fit`` gives at that C (no probabilities): the Cs solved in increasing order
        over one kernel-row cache per class pair, each from the last one's solution
        (``fit_exact(cs=...)``). What the CV estimators' search fits; string kernels only."""
        native_params = self._check_params()
        X, y = self._validate_fit(X, y)
        rows = self._training_rows(X, y, sample_weight)
        self.classes_ = rows.classes
        self.class_weight_ = rows.class_weights
        order = sorted(set(float(c) for c in cs))
        results = self._fit_native(
            rows.X,
            rows.y_index,
            rows.weights,
            n_classes=len(rows.classes),
            **dict(native_params, cs=order),
        )
        n_pairs = len(results) // len(order)
        models = {}
        for k, c in enumerate(order):
            model = copy.copy(self)
            model.C = c
            model._assemble(rows.X, rows.y_index, results[k * n_pairs : (k + 1) * n_pairs])
            if rows.kept is not None:
                model.support_ = rows.kept[model.support_].astype(np.int32)
            models[c] = model
        return [models[float(c)] for c in cs]

    def _fit_rows(self, rows: TrainingRows, native_params: Dict[str, Any]) -> None:
        pairs = self._fit_native(
            rows.X,
            rows.y_index,
            rows.weights,
            n_classes=len(rows.classes),
            **native_params,
        )
        self._assemble(rows.X, rows.y_index, pairs)

    def _fold_rows(self, X: Any, rows: np.ndarray, columns: np.ndarray) -> Any:
        """Rows of X for a cross-validation fold: of a precomputed kernel, the columns of the
        fold's training rows only."""
        if self._from_gram():
            return X[np.ix_(rows, columns)]
        return X[rows]

    def _assemble(self, X: Any, y_index: np.ndarray, pairs: List[Dict[str, Any]]) -> None:
        """SVC's attributes from the per-pair solutions."""
        n_classes = len(self.classes_)
        is_sv = np.zeros(X.shape[0], dtype=bool)
        for p in pairs:
            is_sv[p["support"]] = True
        rows = np.flatnonzero(is_sv)
        # Grouped by class, original order inside a class (as SVC).
        support = rows[np.argsort(y_index[rows], kind="stable")]
        position = np.full(X.shape[0], -1, dtype=np.int64)
        position[support] = np.arange(len(support))
        n_pairs = len(pairs)
        # LIBSVM's layout: row b - 1 holds class a's coefficients in pair (a, b), row a class
        # b's; positive values vote for the pair's first class.
        dual_coef = np.zeros((max(n_classes - 1, 1), len(support)))
        rho = np.empty(n_pairs)
        for k, p in enumerate(pairs):
            a, b = p["classes"]
            cols = position[p["support"]]
            rho[k] = p["rho"]
            of_a = y_index[p["support"]] == a
            dual_coef[b - 1, cols[of_a]] = p["coef"][of_a]
            dual_coef[a, cols[~of_a]] = p["coef"][~of_a]
        self.support_ = support.astype(np.int32)
        self.support_vectors_ = self._support_vectors(X, support)
        self.n_support_ = np.bincount(y_index[support], minlength=n_classes).astype(np.int32)
        self._rho = rho
        if n_classes == 2:
            # SVC's binary convention: positive decision values mean classes_[1].
            self._set_dual_coef(-dual_coef)
            self.intercept_ = rho.copy()
        else:
            self._set_dual_coef(dual_coef)
            self.intercept_ = -rho
        self.n_iter_ = np.array([p["iterations"] for p in pairs], dtype=np.int64)
        self.dual_objective_ = np.array([-p["objective"] for p in pairs])
        self.fit_status_ = 0 if all(p["converged"] for p in pairs) else 1
        self.fit_stats_ = self._fit_stats(pairs)

    def _linear_coef(self) -> Any:
        if len(self.classes_) == 2:
            return _times_vectors(self._dense_dual_coef(), self.support_vectors_)
        # One row per class pair (a, b): class a's vectors with their coefficients in row b - 1,
        # class b's with theirs in row a (LIBSVM's layout, as SVC's coef_).
        starts = np.concatenate([[0], np.cumsum(self.n_support_)])
        sv, dc = self.support_vectors_, self._dense_dual_coef()
        rows = []
        for a in range(len(self.classes_)):
            for b in range(a + 1, len(self.classes_)):
                sa, sb = slice(starts[a], starts[a + 1]), slice(starts[b], starts[b + 1])
                rows.append(_times_vectors(dc[b - 1, sa], sv[sa]) + _times_vectors(dc[a, sb], sv[sb]))
        return sp.vstack(rows).tocsr() if sp.issparse(sv) else np.vstack(rows)

    def _pairwise_decision(self, X: Any) -> np.ndarray:
        """Pairwise decision values sum_i coef_i k(x_i, x) - rho, positive for the first class
        of each pair (LIBSVM's convention), shape (n_samples, n_pairs)."""
        X = self._validate_predict(X)
        # One-vs-one sums over the two classes of each pair only (LIBSVM's layout): a kernel
        # value costs n_classes - 1 multiply-adds.
        dual_coef = self._dense_dual_coef()
        ovo_coef = -dual_coef if len(self.classes_) == 2 else dual_coef
        return self._expansion(X, ovo_coef, -self._rho, class_counts=self.n_support_)

    @rows_doc(
        "ndarray",
        "Shape (n_samples,) for two classes (positive means ``classes_[1]``);\n"
        "(n_samples, n_classes) with ``decision_function_shape='ovr'``, (n_samples, n_pairs)\n"
        "with 'ovo'.",
    )
    @fitted_snapshot
    def decision_function(self, X: Any) -> np.ndarray:
        """Decision values as SVC gives them."""
        dec = self._pairwise_decision(X)
        if len(self.classes_) == 2:
            return -dec[:, 0]
        if self.decision_function_shape == "ovr":
            return _ovr_decision_function(dec < 0, -dec, len(self.classes_))
        return dec

    @rows_doc()
    @fitted_snapshot
    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels by one-vs-one votes (ties to the lower class index, as LIBSVM)."""
        if self.break_ties and self.decision_function_shape == "ovo":
            # Checked here, as SVC: a model fitted with 'ovr' may switch its shape afterwards.
            raise ValueError(
                "break_ties must be False when decision_function_shape is 'ovo' (as SVC)"
            )
        dec = self._pairwise_decision(X)
        n_classes = len(self.classes_)
        if self.break_ties and n_classes > 2 and self.decision_function_shape == "ovr":
            return self.classes_[np.argmax(_ovr_decision_function(dec < 0, -dec, n_classes), axis=1)]
        votes = np.zeros((dec.shape[0], n_classes), dtype=np.int64)
        k = 0
        for a in range(n_classes):
            for b in range(a + 1, n_classes):
                wins_a = dec[:, k] > 0
                votes[:, a] += wins_a
                votes[:, b] += ~wins_a
                k += 1
        return self.classes_[np.argmax(votes, axis=1)]


@dataclass(kw_only=True, eq=False, repr=False)
class ExactRegressor(RegressorMixin, SingleOutputMachine):
    """What ``KernelSVR`` and ``KernelNuSVR`` share: C, the cache, the fit and the predictions. A subclass adds its problem's parameter (epsilon or nu) and names
    its problem."""

    C: float = 1.0
    cache_size: float = 800

    @fit_guard
    def fit(self: _Regressor, X: Any, y: Any, sample_weight: Any = None) -> _Regressor:
        """Train on X and targets y.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows, dense or sparse (the Gram matrix, n_samples x n_samples, for a
            precomputed kernel).
        y : array-like of shape (n_samples,)
            Finite real targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies C for each row, as in SVR and NuSVR; rows of weight <= 0 are left out.

        Returns
        -------
        self : KernelSVR or KernelNuSVR
        """
        params = self._check_params()
        X, y = self._validate_fit(X, y, y_numeric=True)
        y = np.ascontiguousarray(y, dtype=np.float64)
        self._fit_single(X, y, sample_weight, **params)
        return self

    def _fit_path(self: _Regressor, X: Any, y: Any, sample_weight: Any, cs: Any) -> List[_Regressor]:
        """Fitted copies of this estimator, one per C of ``cs`` (in that order), each the
        model ``fit`` gives at that C, solved along the path (``_fit_single_path``; epsilon-SVR
        only): what the CV estimators' search fits; string kernels only."""
        params = self._check_params()
        X, y = self._validate_fit(X, y, y_numeric=True)
        y = np.ascontiguousarray(y, dtype=np.float64)
        return self._fit_single_path(X, y, sample_weight, cs, **params)

    @rows_doc(rows_note="(n_samples, n_train) kernel values for a precomputed kernel.")
    @fitted_snapshot
    def predict(self, X: Any) -> np.ndarray:
        """Predicted targets."""
        return self._decision(X)


class KernelFunctionRows:
    """The matrix k(A, B) of a callable kernel over rows of the training X (A and B index
    arrays into it), never formed whole: ``rows(idx)`` computes the rows the engine asks for, a
    block at a time; indexing by index arrays (rows of zero weight left out) gives the matrix
    over those rows, still not computed. ``call(A, B, n_a, n_b)`` is the estimator's checked
    kernel call."""

    def __init__(self, call: Any, X: Any, rows: np.ndarray, cols: np.ndarray) -> None:
        self._call, self._X, self._rows, self._cols = call, X, rows, cols
        self._columns = _take_rows(X, cols)
        self.shape = (len(rows), len(cols))

    def __getitem__(self, key: Any) -> KernelFunctionRows:
        rows, cols = key if isinstance(key, tuple) else (key, slice(None))
        if isinstance(rows, np.ndarray) and rows.ndim == 2:
            rows = rows[:, 0]  # np.ix_'s column of row indices
        if isinstance(cols, np.ndarray) and cols.ndim == 2:
            cols = cols[0]
        return KernelFunctionRows(self._call, self._X, self._rows[rows], self._cols[cols])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if 0 in self.shape:
            return np.zeros(self.shape, dtype=dtype or np.float64)
        out = self.rows(np.arange(self.shape[0]))
        return out if dtype is None else out.astype(dtype)

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """k(A[idx], B): len(idx) x len(B)."""
        picked = self._rows[np.asarray(idx, dtype=np.intp)]
        return self._call(_take_rows(self._X, picked), self._columns, len(picked), self.shape[1])

    def diagonal(self, block: int = 256) -> np.ndarray:
        """k(a_i, b_i) for a square matrix over the same rows, from blocks of ``block`` rows
        (the function is only asked for k(A, B) blocks)."""
        if self.shape[0] != self.shape[1] or not np.array_equal(self._rows, self._cols):
            raise ValueError("the diagonal of a kernel matrix over other rows than its columns")
        out = np.empty(self.shape[0])
        for start in range(0, self.shape[0], block):
            part = _take_rows(self._X, self._rows[start : start + block])
            m = min(block, self.shape[0] - start)
            out[start : start + m] = np.diag(self._call(part, part, m, m))
        return out


def _take_rows(X: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of X as the kernel function takes them: indexed if X is an array or a
    sparse matrix, else a list of its items (strings, records, any sequence)."""
    if hasattr(X, "iloc"):
        return X.iloc[rows]
    if hasattr(X, "shape"):
        return X[rows]
    return [X[int(i)] for i in rows]


def _times_vectors(coef: np.ndarray, vectors: Any) -> Any:
    """coef @ vectors, sparse (CSR) when the vectors are, as scikit-learn's coef_."""
    if sp.issparse(vectors):
        return sp.csr_matrix(np.atleast_2d(coef)) @ vectors
    return np.atleast_2d(coef) @ vectors


def _gamma_or_one(gamma: Any, X: Any) -> float:
    try:
        return resolve_gamma(gamma, X)
    except ValueError:
        if isinstance(gamma, str):
            return 1.0
        raise


#: ``solver_options`` of both solvers and their defaults.
SHARED_OPTIONS: Dict[str, Any] = dict(shared_rows=True, row_precision="auto")

#: ALFPGM's options (``solver_options``) and their defaults.
ALFPGM_OPTIONS: Dict[str, Any] = dict(
    n_pairs=50,
    min_alpha_opt=5,
    max_alpha_opt=500,
    min_alpha_check=None,
    pair_ratio=0.5,
    alpha_delta_threshold=1e-5,
    al_penalty=None,
    al_max_iter=20,
    fista_max_iter=500,
    inner_tol_factor=0.1,
    inner_rel=0.1,
    power_iters=8,
    lipschitz_safety=1.1,
    restart=True,
    inner="smo",
)


def solver_options(
    solver: str, given: Optional[Dict[str, Any]], n_pairs: int = ALFPGM_OPTIONS["n_pairs"]
) -> Dict[str, Any]:
    """The native solver's keyword arguments from ``solver_options``, every value checked;
    ``n_pairs`` is the estimator's default of that option."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ValueError(f"solver_options must be a dict or None, got {given!r}")
    unknown = sorted(set(given) - set(ALFPGM_OPTIONS) - set(SHARED_OPTIONS))
    if unknown:
        raise ValueError(
            f"solver_options has unknown keys {unknown}; the options are "
            f"{sorted(SHARED_OPTIONS)} and ALFPGM's {sorted(ALFPGM_OPTIONS)}"
        )
    alfpgm_only = sorted(set(given) - set(SHARED_OPTIONS))
    if alfpgm_only and solver != "alfpgm":
        raise ValueError(
            f"solver_options {alfpgm_only} are ALFPGM's; solver={solver!r} takes only "
            f"{sorted(SHARED_OPTIONS)}"
        )
    o = {**SHARED_OPTIONS, **ALFPGM_OPTIONS, "n_pairs": n_pairs, **given}
    check_choice("shared_rows", o["shared_rows"], (True, False))
    check_choice("row_precision", o["row_precision"], ("auto", "float32", "float64"))
    check_integer("n_pairs", o["n_pairs"], 1)
    check_integer("min_alpha_opt", o["min_alpha_opt"], 0)
    check_integer("max_alpha_opt", o["max_alpha_opt"], 1)
    if o["min_alpha_opt"] > o["max_alpha_opt"]:
        raise ValueError(
            f"min_alpha_opt must not exceed max_alpha_opt, got {o['min_alpha_opt']} > "
            f"{o['max_alpha_opt']}"
        )
    if o["min_alpha_check"] is not None:
        check_integer("min_alpha_check", o["min_alpha_check"], 1)
    check_nonnegative("pair_ratio", o["pair_ratio"])
    if o["pair_ratio"] >= 1:
        raise ValueError(f"pair_ratio must lie in [0, 1), got {o['pair_ratio']!r}")
    check_nonnegative("alpha_delta_threshold", o["alpha_delta_threshold"])
    if o["al_penalty"] is not None:
        check_positive("al_penalty", o["al_penalty"])
    check_integer("al_max_iter", o["al_max_iter"], 1)
    check_integer("fista_max_iter", o["fista_max_iter"], 1)
    check_integer("power_iters", o["power_iters"], 1)
    check_positive("inner_tol_factor", o["inner_tol_factor"])
    check_positive("inner_rel", o["inner_rel"])
    check_positive("lipschitz_safety", o["lipschitz_safety"], minimum=1.0)
    check_choice("restart", o["restart"], (True, False))
    check_choice("inner", o["inner"], ("smo", "fista"))
    return dict(
        shared_rows=bool(o["shared_rows"]),
        row_precision=str(o["row_precision"]),
        n_pairs=int(o["n_pairs"]),
        min_alpha_opt=int(o["min_alpha_opt"]),
        max_alpha_opt=int(o["max_alpha_opt"]),
        min_alpha_check=0 if o["min_alpha_check"] is None else int(o["min_alpha_check"]),
        pair_ratio=float(o["pair_ratio"]),
        alpha_delta_threshold=float(o["alpha_delta_threshold"]),
        al_penalty=0.0 if o["al_penalty"] is None else float(o["al_penalty"]),
        al_max_iter=int(o["al_max_iter"]),
        fista_max_iter=int(o["fista_max_iter"]),
        inner_tol_factor=float(o["inner_tol_factor"]),
        inner_rel=float(o["inner_rel"]),
        power_iters=int(o["power_iters"]),
        lipschitz_safety=float(o["lipschitz_safety"]),
        restart=bool(o["restart"]),
        inner=str(o["inner"]),
    )


def _print_progress(info: Dict[str, Any]) -> None:
    what = f"pair {info['epoch']}/{info['epochs']}" if info["epochs"] > 1 else "fit"
    print(
        f"[budgetsvm] {what}: iteration {info['iteration']}, "
        f"KKT gap {info.get('gap', float('nan')):.3g}, {info['n_sv']} SVs, "
        f"{info['seconds']:.2f} s",
        file=sys.stdout,
        flush=True,
    )

