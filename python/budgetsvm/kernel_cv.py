"""The exact SVMs with C and gamma (and epsilon) chosen by cross-validation: ``KernelSVCCV`` and
``KernelSVRCV``, scikit-learn's *CV convention (``LogisticRegressionCV``, ``RidgeCV``).

The search is GridSearchCV's (the same grid, folds and scores, up to the solvers' tolerance)
without its cold fits: on each fold and for each gamma (and epsilon), the Cs are solved in
increasing order over one kernel-row cache, each from the last one's solution scaled to its box
(``fit_exact(cs=...)``, ``machines::solve_dual_path``); from 2,000 training rows a fold, by
successive halving over rows (the points on growing subsamples, a third kept each round, the
last one cross-validated on all rows). Then the best point is fitted on all rows, and the
estimator predicts with that model (``best_estimator_``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from sklearn.base import RegressorMixin, clone

from budgetsvm._exact import check_epsilon, check_nu
from budgetsvm._search_cv import (
    DEFAULT_CS,
    DEFAULT_GAMMA_FACTORS,
    EpsilonSearch,
    FoldRows,
    SearchClassifierMixin,
    SearchCV,
    _values,
)
from budgetsvm._validation import check_choice
from budgetsvm.kernel_nu_svc import KernelNuSVC
from budgetsvm.kernel_nu_svr import KernelNuSVR
from budgetsvm.kernel_svc import KernelSVC
from budgetsvm.kernel_svr import KernelSVR

__all__ = [
    "KernelNuSVCCV",
    "KernelNuSVRCV",
    "KernelSVCCV",
    "KernelSVRCV",
    "DEFAULT_CS",
    "DEFAULT_GAMMA_FACTORS",
]

#: The kernels whose parameters a search takes (a precomputed or callable kernel has no gamma
#: to search, and its matrix is not the features the folds split).
SEARCH_KERNELS = ("rbf", "linear", "poly", "sigmoid")


@dataclass(kw_only=True, eq=False, repr=False)
class _ExactSearchCV(SearchCV):
    """What ``KernelSVCCV`` and ``KernelSVRCV`` share: the exact SVM's parameters, and each
    round's Cs of a fold solved along one path."""

    kernel: str = "rbf"
    degree: int = 3
    coef0: float = 0.0
    shrinking: bool = True
    tol: float = 1e-3
    cache_size: float = 1000
    max_iter: int = -1
    solver: str = "alfpgm"
    solver_options: Optional[Dict[str, Any]] = None

    def _estimator_params(self) -> Dict[str, Any]:
        names = (
            "kernel degree coef0 shrinking tol cache_size verbose max_iter solver n_jobs "
            "solver_options"
        ).split()
        return {name: getattr(self, name) for name in names}

    def _check_search_params(self) -> None:
        check_choice("kernel", self.kernel, SEARCH_KERNELS)

    def _grid_axes(self, X: Any) -> Dict[str, List[Any]]:
        axes = super()._grid_axes(X)
        if self.kernel == "linear":
            axes["gamma"] = axes["gamma"][:1]  # unused by the linear kernel: one point per C
        return axes

    def _fit_members(
        self, template: Any, fixed: Dict[str, Any], Cs: List[float], fold: FoldRows
    ) -> List[Any]:
        estimator = clone(template).set_params(**fixed, C=Cs[0])
        return estimator._fit_path(fold.X, fold.y, fold.weights, Cs)


@dataclass(kw_only=True, eq=False, repr=False)
class _ExactClassifierSearch(_ExactSearchCV):
    """The exact classifiers' own parameters, passed to every fit (probabilities: the refit's)."""

    class_weight: Any = None
    probability: bool = False
    decision_function_shape: str = "ovr"
    break_ties: bool = False

    def _estimator_params(self) -> Dict[str, Any]:
        names = "class_weight probability decision_function_shape break_ties random_state"
        return {
            **super()._estimator_params(),
            **{name: getattr(self, name) for name in names.split()},
        }


@dataclass(kw_only=True, eq=False, repr=False)
class _NuGrid:
    """The nu axis (``nus``, or ``[nu]``) of the nu machines' searches, whose points are fitted
    cold (the C path is C-SVC's and epsilon-SVR's)."""

    nu: float = 0.5
    nus: Optional[Sequence[float]] = None

    def _grid_axes(self, X: Any) -> Dict[str, List[Any]]:
        axes = super()._grid_axes(X)  # type: ignore[misc]
        axes["nu"] = _values("nus", self.nus, [self.nu], check_nu)
        return axes

    def _fit_members(
        self, template: Any, fixed: Dict[str, Any], Cs: List[float], fold: FoldRows
    ) -> List[Any]:
        return [
            clone(template)
            .set_params(**fixed, **({} if c is None else {"C": c}))
            .fit(fold.X, fold.y, sample_weight=fold.weights)
            for c in Cs
        ]


@dataclass(kw_only=True, eq=False, repr=False)
class KernelSVCCV(SearchClassifierMixin, _ExactClassifierSearch):
    """``KernelSVC`` with C and gamma chosen by cross-validation.

    Searches the grid ``Cs`` x ``gammas`` as scikit-learn's ``GridSearchCV(KernelSVC(), ...)``
    does (``search='grid'``: the same folds, scores and ``cv_results_``, up to the solvers'
    tolerance), but without one cold fit per point and fold: on each fold and for each gamma
    the Cs are solved in increasing order over one kernel-row cache, each started from the
    last one's solution scaled to its box (its gradient follows without a kernel row). On
    more rows (``search='auto'``) the points compete on growing subsamples first
    (successive halving). Then the best point is fitted on all rows (``refit``) and the
    estimator predicts with that model.

    Parameters
    ----------
    Cs : list of float, default=None
        The Cs searched (each finite and > 0); None: ``DEFAULT_CS`` (0.25, 1, 4, 16, 64).
    gammas : list of {float, 'scale', 'auto'}, default=None
        The kernel widths searched; None: 1/4, 1 and 4 times gamma='scale' of the training
        rows (``DEFAULT_GAMMA_FACTORS``). 'scale' and 'auto' are resolved on each fold's rows,
        as GridSearchCV resolves them. The linear kernel searches C only.
    cv : int, cross-validation generator or iterable, default=None
        As GridSearchCV's: None is 5-fold, an int k-fold (stratified for classes).
    scoring : str, callable or None, default=None
        As GridSearchCV's single scoring; None: accuracy (``score``). The search fits no
        probabilities, so scorings that need ``predict_proba`` are refused.
    refit : bool, default=True
        Fit the best point on all rows (``best_estimator_``), which the predictions use.
    kernel, degree, coef0, shrinking, tol, max_iter, solver, solver_options :
        As ``KernelSVC``'s, for every fit of the search and the refit.
    class_weight, probability, decision_function_shape, break_ties, random_state :
        As ``KernelSVC``'s (probabilities: the refit's only).
    cache_size : float, default=1000
        MB of kernel rows each fit keeps (``KernelSVC``'s default is 200): the Cs of a path
        reuse the rows the cache holds.
    n_jobs : int or None, default=None
        Threads of each fit (the folds and grid points run one after another); None:
        ``budgetsvm.set_num_threads``, -1 all cores.
    verbose : bool, default=False
        A line per fold and gamma.
    search : {'auto', 'grid', 'halving'}, default='auto'
        'grid': every point on all folds, GridSearchCV's search. 'halving': successive
        halving over rows (scikit-learn's HalvingGridSearchCV's idea): every point is trained
        on a subsample of each fold's training rows and scored on all its validation rows,
        the best third goes on to three times the rows, until one point is left, which the
        last round cross-validates on all rows (its ``best_score_`` is GridSearchCV's for that
        point); the first round takes at least 300 rows a fold. 'auto': halving from 2,000
        training rows a fold, the grid below.
    random_state : int, RandomState instance or None, default=None
        Seeds the halving rounds' subsamples (and ``KernelSVC``'s probability folds).

    Attributes
    ----------
    cv_results_ : dict
        GridSearchCV's: ``params``, ``param_C``, ``param_gamma``, ``split{k}_test_score``,
        ``mean_test_score``, ``std_test_score``, ``rank_test_score`` and the fit and score
        times (each C's fit time is its path's shared equally). After halving,
        HalvingGridSearchCV's: every round's points, with ``iter`` and ``n_resources``.
    best_params_, best_score_, best_index_ :
        The point ranked first (the first of ties; after halving, the last round's), its mean
        test score, its index.
    n_iterations_, n_candidates_, n_resources_ :
        After halving: the rounds, the points and training rows a fold in each.
    best_estimator_ : KernelSVC
        The refitted model; its learned attributes (``classes_``, ``support_vectors_``,
        ``dual_coef_``, ``intercept_``...) read through this estimator.
    n_splits_, refit_time_, scorer_ :
        As GridSearchCV's.
    """

    _estimator = KernelSVC


@dataclass(kw_only=True, eq=False, repr=False)
class KernelSVRCV(RegressorMixin, EpsilonSearch, _ExactSearchCV):
    """``KernelSVR`` with C, gamma (and epsilon) chosen by cross-validation.

    ``KernelSVCCV``'s search (see there) for epsilon-SVR: the grid ``Cs`` x ``gammas`` x
    ``epsilons``, the Cs of each (gamma, epsilon) solved along one path per fold; scored by
    R^2 unless ``scoring`` says otherwise (the default 5 folds are plain k-fold).

    Parameters
    ----------
    Cs, gammas, cv, scoring, refit, cache_size, n_jobs, verbose, search, random_state :
        As ``KernelSVCCV``'s (scoring None: R^2).
    kernel, degree, coef0, shrinking, tol, max_iter, solver, solver_options :
        As ``KernelSVR``'s, for every fit of the search and the refit.
    epsilon : float, default=0.1
        The tube's half width when ``epsilons`` is None.
    epsilons : list of float, default=None
        The widths searched (each >= 0); None: ``[epsilon]``.

    Attributes
    ----------
    As ``KernelSVCCV``'s; ``best_estimator_`` is a ``KernelSVR``.
    """

    _estimator = KernelSVR

    def _estimator_params(self) -> Dict[str, Any]:
        return {**super()._estimator_params(), "epsilon": check_epsilon(self.epsilon)}


@dataclass(kw_only=True, eq=False, repr=False)
class KernelNuSVCCV(SearchClassifierMixin, _NuGrid, _ExactClassifierSearch):
    """``KernelNuSVC`` with nu and gamma chosen by cross-validation.

    ``KernelSVCCV``'s search (see there) over ``nus`` x ``gammas``, each point fitted cold (a
    change of nu moves the whole dual polytope: there is no path to share), with successive
    halving over rows from 2,000 training rows a fold (``search='auto'``).

    Parameters
    ----------
    nus : list of float, default=None
        The nus searched (each in (0, 1]); None: ``[nu]``.
    nu : float, default=0.5
        The nu when ``nus`` is None.
    gammas, cv, scoring, refit, cache_size, n_jobs, verbose, search, random_state :
        As ``KernelSVCCV``'s.
    Cs : None
        Must be None: nu-SVC has no C.
    kernel, degree, coef0, shrinking, tol, max_iter, solver, solver_options :
        As ``KernelNuSVC``'s, for every fit of the search and the refit.
    class_weight, probability, decision_function_shape, break_ties :
        As ``KernelNuSVC``'s (probabilities: the refit's only).

    Attributes
    ----------
    As ``KernelSVCCV``'s; ``best_params_`` holds gamma and nu, ``best_estimator_`` is a
    ``KernelNuSVC``.
    """

    _estimator = KernelNuSVC

    def _check_search_params(self) -> None:
        super()._check_search_params()
        if self.Cs is not None:
            raise ValueError("Cs must be None: nu-SVC has no C (KernelNuSVCCV searches nus)")

    def _grid_axes(self, X: Any) -> Dict[str, List[Any]]:
        axes = super()._grid_axes(X)
        del axes["C"]
        return axes


@dataclass(kw_only=True, eq=False, repr=False)
class KernelNuSVRCV(RegressorMixin, _NuGrid, _ExactSearchCV):
    """``KernelNuSVR`` with C, nu and gamma chosen by cross-validation.

    ``KernelSVRCV``'s search (see there) over ``Cs`` x ``gammas`` x ``nus``, each point
    fitted cold.

    Parameters
    ----------
    Cs, gammas, cv, scoring, refit, cache_size, n_jobs, verbose, search, random_state :
        As ``KernelSVRCV``'s.
    nus : list of float, default=None
        The nus searched (each in (0, 1]); None: ``[nu]``.
    nu : float, default=0.5
        The nu when ``nus`` is None.
    kernel, degree, coef0, shrinking, tol, max_iter, solver, solver_options :
        As ``KernelNuSVR``'s, for every fit of the search and the refit.

    Attributes
    ----------
    As ``KernelSVCCV``'s; ``best_estimator_`` is a ``KernelNuSVR``.
    """

    _estimator = KernelNuSVR
