"""The exact Gaussian-kernel SVC (ALFPGM or WSS2 SMO in Rust), a drop-in for scikit-learn's SVC."""

from __future__ import annotations

import numbers
import sys
import warnings
from typing import Any, Dict, List, Optional

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import _ovr_decision_function
from sklearn.utils.validation import check_is_fitted, validate_data

from budgetsvm import _budgetsvm
from budgetsvm._probability import ProbabilityMixin
from budgetsvm._validation import (
    TrainingRows,
    check_choice,
    check_n_jobs,
    check_positive,
    fit_guard,
    resolve_gamma,
    to_native,
    training_rows,
)

SOLVERS = ("alfpgm", "smo")
SHAPES = ("ovr", "ovo")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_nonnegative(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


class KernelSVC(ProbabilityMixin, ClassifierMixin, BaseEstimator):
    """Exact C-SVC with the Gaussian kernel, trained by ALFPGM or by WSS2 SMO.

    Solves the same problem as scikit-learn's ``SVC(kernel='rbf')`` (LIBSVM): the dual
    min_a 1/2 a^T Q a - e^T a subject to y^T a = 0 and 0 <= a_i <= C, with the bias, to the
    tolerance ``tol`` on the maximal KKT violation m(a) - M(a). ``solver='alfpgm'`` (default)
    optimises ``n_pairs`` pairs of variables per step (pWSS selection of Aregbesola & Griva
    2022; the working set's subproblem solved by SMO on its kernel block, or by the paper's
    augmented Lagrangian with FISTA, ``solver_options={'inner': 'fista'}``), the kernel rows of a
    step computed in parallel and kept in an LRU cache; ``solver='smo'`` is LIBSVM's SMO with
    second-order working-set selection. Both shrink like LIBSVM (``shrinking=True``). More than two classes are trained
    one-vs-one like SVC, the class pairs in parallel.

    Parameters
    ----------
    C : float, default=1.0
        Upper bound of the dual variables (regularisation, as in SVC).
    gamma : {'scale', 'auto'} or float, default='scale'
        Kernel width in exp(-gamma ||x - x'||^2); 'scale' is 1 / (n_features * X.var()).
    solver : {'alfpgm', 'smo'}, default='alfpgm'
    shrinking : bool, default=True
        As SVC's: variables at a bound that cannot enter a violating pair leave the active set
        (steps then select, update and compute kernel rows over the active variables only);
        their gradient is reconstructed before the final optimality test, so the solution and
        the stopping rule are those without shrinking.
    tol : float, default=1e-3
        Stop when m(a) - M(a) < tol (SVC's ``tol``).
    cache_size : float, default=200
        Kernel-row cache in MB per class-pair problem (as SVC's ``cache_size``; rows are float32
        like LIBSVM's, so the same size holds the same number of rows).
    max_iter : int, default=-1
        Iteration cap per class pair (SMO: pair steps; ALFPGM: working sets); -1 is the solver's
        default (SMO: max(10^7, 100 n) like LIBSVM, ALFPGM: max(10^5, n)). Reaching it gives a
        ``ConvergenceWarning``.
    n_jobs : int or None, default=None
        Threads for this estimator (kernel rows, gradient updates, class pairs, predictions);
        None uses ``budgetsvm.set_num_threads`` (default all cores), -1 all cores.
    class_weight : dict, 'balanced' or None, default=None
        As in SVC: the box of row i becomes [0, C * class_weight[y_i]] (times its sample
        weight); 'balanced' is n_samples / (n_classes * the class's total sample weight).
    probability : bool, default=False
        As in SVC: Platt sigmoids per class pair fitted on decision values from an internal
        5-fold cross-validation (five more fits, each on 4/5 of the rows), coupled for several
        classes by Wu, Lin & Weng's method; enables ``predict_proba``.
    random_state : int, RandomState or None, default=None
        Seed of the cross-validation folds of ``probability=True`` (the solver is
        deterministic).
    verbose : bool, default=False
        Print a progress line per class pair about every second and when it finishes.
    decision_function_shape : {'ovr', 'ovo'}, default='ovr'
        As in SVC: 'ovr' turns the pairwise values into (n_samples, n_classes) one-vs-rest
        scores by votes plus confidences, 'ovo' returns the pairwise values.
    solver_options : dict or None, default=None
        Solver internals, for experiments (the defaults are the measured best; see
        ``docs/alfpgm_notes.md``). For both solvers:

        - ``shared_rows`` (True): with more than two classes, the class pairs take their
          kernel rows from one store of ``cache_size`` shared by all pairs, where the part of a
          row against the row's own class is computed once for every pair the row is in.
          False gives each pair kernel rows of its own only, like LIBSVM.

        ALFPGM's, with their defaults:

        - ``n_pairs`` (50): pairs per working set (at most 2 * n_pairs variables per step).
        - ``min_alpha_opt``, ``max_alpha_opt`` (5, 500): the limiter; a variable leaves the
          selection after ``max_alpha_opt`` optimisations, or after ``min_alpha_opt`` when it
          sits at 0 or C and stopped changing (moved less than ``alpha_delta_threshold * C``).
          The selection falls back to all variables when the limited sets have no violating
          pair; the stopping test always uses all variables.
        - ``alpha_delta_threshold`` (1e-5): see above.
        - ``min_alpha_check`` (None: all of I_low): the j of each pair is searched among this
          many of the most violating variables of I_low.
        - ``pair_ratio`` (0.5): pairs are added to a working set while their violation (after
          the look-ahead update by the pairs already chosen) is at least this fraction of the
          first pair's; ``n_pairs`` is then a cap. 0 always takes ``n_pairs`` pairs.
        - ``al_penalty`` (None): augmented Lagrangian scaling k; None sets
          k = ``lambda_max(Q_BB) / |B|`` per step.
        - ``al_max_iter``, ``fista_max_iter`` (20, 500): caps of the multiplier updates per
          working set and of FISTA iterations per update.
        - ``inner_tol_factor``, ``inner_rel`` (0.1, 0.1): FISTA stops when its gradient mapping
          is below max(inner_tol_factor * tol, inner_rel * violation of the working set).
        - ``power_iters`` (8): power iterations for lambda_max(Q_BB) (the Lipschitz constant).
        - ``lipschitz_safety`` (1.1): factor on the power-method estimate.
        - ``restart`` (True): FISTA adaptive restart.
        - ``inner`` ('smo'): the subproblem solver of a working set: 'smo' (second-order SMO
          on the subproblem, linear in the working set's size per step) or 'fista' (the
          paper's augmented Lagrangian with FISTA; the ``al_*``, ``fista_*``,
          ``power_iters``, ``lipschitz_safety`` and ``restart`` options apply to it).

        Unknown keys, and any key with ``solver='smo'``, are errors.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors in the training data, grouped by class (as SVC).
    support_vectors_ : ndarray or scipy.sparse.csr_matrix of shape (n_SV, n_features)
        CSR for sparse input (as SVC), so nothing of size n_features is made per vector.
    n_support_ : ndarray of shape (n_classes,)
        Support vectors per class.
    dual_coef_ : ndarray of shape (n_classes - 1, n_SV)
        y_i a_i in SVC's layout (for two classes, positive for ``classes_[1]``).
    intercept_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
    gamma_ : float
    n_iter_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
        Iterations per class pair (SMO: pair steps; ALFPGM: working sets).
    dual_objective_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
        D(a) = e^T a - 1/2 a^T Q a per class pair (LIBSVM prints obj = -D).
    fit_stats_ : dict
        Per-pair KKT gap, convergence flags and smallest active set (``min_active``, shrinking),
        ALFPGM's SMO fallback steps and FISTA iterations, kernel-row cache hits/misses, kernel
        values computed (``kernel_values``; a full row is n of them) and the seconds spent
        computing kernel rows, total seconds.
    n_features_in_ : int
    class_weight_ : ndarray of shape (n_classes,)
    probA_, probB_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
        With ``probability=True``: the sigmoid 1 / (1 + exp(A d + B)) of each class pair, d its
        one-vs-one decision value (positive for the pair's first class), as SVC.

    Examples
    --------
    >>> import numpy as np
    >>> from budgetsvm import KernelSVC
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(500, 2))
    >>> y = (X[:, 0] * X[:, 1] > 0).astype(int)
    >>> clf = KernelSVC(C=10, gamma=2.0).fit(X, y)
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    def __init__(
        self,
        C: float = 1.0,
        gamma: Any = "scale",
        solver: str = "alfpgm",
        shrinking: bool = True,
        tol: float = 1e-3,
        cache_size: float = 200,
        max_iter: int = -1,
        n_jobs: Optional[int] = None,
        verbose: bool = False,
        decision_function_shape: str = "ovr",
        class_weight: Any = None,
        probability: bool = False,
        random_state: Any = None,
        solver_options: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.C = C
        self.gamma = gamma
        self.solver = solver
        self.shrinking = shrinking
        self.tol = tol
        self.cache_size = cache_size
        self.max_iter = max_iter
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.decision_function_shape = decision_function_shape
        self.class_weight = class_weight
        self.probability = probability
        self.random_state = random_state
        self.solver_options = solver_options

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _native_params(self) -> Dict[str, Any]:
        check_positive("C", self.C)
        check_positive("tol", self.tol)
        check_positive("cache_size", self.cache_size)
        check_choice("solver", self.solver, SOLVERS)
        check_choice("decision_function_shape", self.decision_function_shape, SHAPES)
        check_choice("verbose", self.verbose, (True, False))
        check_choice("probability", self.probability, (True, False))
        if not isinstance(self.shrinking, (bool, np.bool_)):
            raise ValueError(f"shrinking must be True or False, got {self.shrinking!r}")
        _check_int("max_iter", self.max_iter, -1)
        if self.max_iter == 0:
            raise ValueError("max_iter must be -1 (the solver's default) or >= 1, got 0")
        return dict(
            c=float(self.C),
            solver=self.solver,
            shrinking=bool(self.shrinking),
            tol=float(self.tol),
            cache_size=float(self.cache_size),
            max_iter=0 if self.max_iter == -1 else int(self.max_iter),
            n_threads=check_n_jobs(self.n_jobs),
            **_alfpgm_options(self.solver, self.solver_options),
        )

    @fit_guard
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> KernelSVC:
        """Train on X and labels y.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows, dense or sparse.
        y : array-like of shape (n_samples,)
            Class labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies C for each row, as in SVC; rows of weight 0 are left out.

        Returns
        -------
        self : KernelSVC
        """
        native_params = self._native_params()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, order="C")
        rows = training_rows(type(self).__name__, X, y, sample_weight, self.class_weight)
        self.classes_ = rows.classes
        self.class_weight_ = rows.class_weights
        self._fit_rows(rows, native_params)
        if rows.kept is not None:
            self.support_ = rows.kept[self.support_].astype(np.int32)
        if self.probability:
            seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
            self._fit_probability(rows, seed)
        return self

    def _fit_rows(self, rows: TrainingRows, native_params: Dict[str, Any]) -> None:
        X = rows.X
        self.gamma_ = resolve_gamma(self.gamma, X)
        pairs: List[Dict[str, Any]] = _budgetsvm.fit_kernel_svc(
            to_native(X),
            rows.y_index,
            len(rows.classes),
            gamma=self.gamma_,
            report_every=1.0 if self.verbose else None,
            callback=_print_progress if self.verbose else None,
            sample_weight=rows.weights,
            **native_params,
        )
        self._assemble(X, rows.y_index, pairs)
        if not all(p["converged"] for p in pairs):
            warnings.warn(
                f"KernelSVC ({self.solver}) stopped at the iteration cap before reaching "
                f"tol={self.tol}: KKT gaps {[round(p['gap'], 6) for p in pairs]}; "
                "raise max_iter or tol",
                ConvergenceWarning,
                stacklevel=3,
            )

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
        sv = X[support]
        self.support_ = support.astype(np.int32)
        if sp.issparse(sv):
            sv = sp.csr_matrix(sv)
            sv.sort_indices()
            self.support_vectors_ = sv
        else:
            self.support_vectors_ = np.ascontiguousarray(sv)
        self.n_support_ = np.bincount(y_index[support], minlength=n_classes).astype(np.int32)
        self._rho = rho
        if n_classes == 2:
            # SVC's binary convention: positive decision values mean classes_[1].
            self.dual_coef_ = -dual_coef
            self.intercept_ = rho.copy()
        else:
            self.dual_coef_ = dual_coef
            self.intercept_ = -rho
        self.n_iter_ = np.array([p["iterations"] for p in pairs], dtype=np.int64)
        self.dual_objective_ = np.array([-p["objective"] for p in pairs])
        self.fit_stats_ = {
            "gap": [p["gap"] for p in pairs],
            "converged": [p["converged"] for p in pairs],
            "fallback_steps": int(sum(p["fallback_steps"] for p in pairs)),
            "inner_iterations": int(sum(p["inner_iterations"] for p in pairs)),
            "cache_hits": int(sum(p["cache_hits"] for p in pairs)),
            "cache_misses": int(sum(p["cache_misses"] for p in pairs)),
            "kernel_seconds": float(sum(p["kernel_seconds"] for p in pairs)),
            "kernel_values": int(sum(p["kernel_values"] for p in pairs)),
            "min_active": [p["min_active"] for p in pairs],
            "seconds": float(sum(p["seconds"] for p in pairs)),
        }

    def _pairwise_decision(self, X: Any) -> np.ndarray:
        """Pairwise decision values sum_i coef_i k(x_i, x) - rho, positive for the first class
        of each pair (LIBSVM's convention), shape (n_samples, n_pairs)."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, order="C", reset=False)
        if self.support_vectors_.shape[0] == 0:
            return np.zeros((X.shape[0], len(self._rho))) - self._rho
        # One-vs-one sums over the two classes of each pair only (LIBSVM's layout): a kernel
        # value costs n_classes - 1 multiply-adds.
        ovo_coef = -self.dual_coef_ if len(self.classes_) == 2 else self.dual_coef_
        return _budgetsvm.decision_function(
            to_native(self.support_vectors_),
            np.ascontiguousarray(ovo_coef, dtype=np.float64),
            self.gamma_,
            to_native(X),
            n_threads=check_n_jobs(self.n_jobs),
            class_counts=self.n_support_.astype(np.int64),
            intercept=-self._rho,
        )

    def decision_function(self, X: Any) -> np.ndarray:
        """Decision values as SVC gives them.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray
            Shape (n_samples,) for two classes (positive means ``classes_[1]``);
            (n_samples, n_classes) with ``decision_function_shape='ovr'``, (n_samples, n_pairs)
            with 'ovo'.
        """
        dec = self._pairwise_decision(X)
        if len(self.classes_) == 2:
            return -dec[:, 0]
        if self.decision_function_shape == "ovr":
            return _ovr_decision_function(dec < 0, -dec, len(self.classes_))
        return dec

    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels by one-vs-one votes (ties to the lower class index, as LIBSVM).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        dec = self._pairwise_decision(X)
        n_classes = len(self.classes_)
        votes = np.zeros((dec.shape[0], n_classes), dtype=np.int64)
        k = 0
        for a in range(n_classes):
            for b in range(a + 1, n_classes):
                wins_a = dec[:, k] > 0
                votes[:, a] += wins_a
                votes[:, b] += ~wins_a
                k += 1
        return self.classes_[np.argmax(votes, axis=1)]


#: ``solver_options`` of both solvers and their defaults.
SHARED_OPTIONS: Dict[str, Any] = dict(shared_rows=True)

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


def _alfpgm_options(solver: str, given: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The native solver's keyword arguments from ``solver_options``, every value checked."""
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
    o = {**SHARED_OPTIONS, **ALFPGM_OPTIONS, **given}
    check_choice("shared_rows", o["shared_rows"], (True, False))
    _check_int("n_pairs", o["n_pairs"], 1)
    _check_int("min_alpha_opt", o["min_alpha_opt"], 0)
    _check_int("max_alpha_opt", o["max_alpha_opt"], 1)
    if o["min_alpha_opt"] > o["max_alpha_opt"]:
        raise ValueError(
            f"min_alpha_opt must not exceed max_alpha_opt, got {o['min_alpha_opt']} > "
            f"{o['max_alpha_opt']}"
        )
    if o["min_alpha_check"] is not None:
        _check_int("min_alpha_check", o["min_alpha_check"], 1)
    _check_nonnegative("pair_ratio", o["pair_ratio"])
    if o["pair_ratio"] >= 1:
        raise ValueError(f"pair_ratio must lie in [0, 1), got {o['pair_ratio']!r}")
    _check_nonnegative("alpha_delta_threshold", o["alpha_delta_threshold"])
    if o["al_penalty"] is not None:
        check_positive("al_penalty", o["al_penalty"])
    _check_int("al_max_iter", o["al_max_iter"], 1)
    _check_int("fista_max_iter", o["fista_max_iter"], 1)
    _check_int("power_iters", o["power_iters"], 1)
    check_positive("inner_tol_factor", o["inner_tol_factor"])
    check_positive("inner_rel", o["inner_rel"])
    check_positive("lipschitz_safety", o["lipschitz_safety"], minimum=1.0)
    check_choice("restart", o["restart"], (True, False))
    check_choice("inner", o["inner"], ("smo", "fista"))
    return dict(
        shared_rows=bool(o["shared_rows"]),
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
    print(
        f"[budgetsvm] pair {info['epoch']}/{info['epochs']}: iteration {info['iteration']}, "
        f"KKT gap {info.get('gap', float('nan')):.3g}, {info['n_sv']} SVs, "
        f"{info['seconds']:.2f} s",
        file=sys.stdout,
        flush=True,
    )
