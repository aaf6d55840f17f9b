"""The exact kernel epsilon-SVR (ALFPGM or WSS2 SMO in Rust), a drop-in for scikit-learn's SVR."""

from __future__ import annotations

from dataclasses import dataclass

# ExactRegressor, KernelSVR's base, lives with the other exact bases in _exact; imported here,
# it stays importable from this module, its home before.
from budgetsvm._exact import ExactRegressor

__all__ = ["KernelSVR"]


@dataclass(kw_only=True, eq=False, repr=False)
class KernelSVR(ExactRegressor):
    """Exact epsilon-support vector regression with any of SVR's kernels.

    Solves scikit-learn's ``SVR`` problem (LIBSVM's epsilon-SVR) to the tolerance ``tol`` on
    the maximal KKT violation. LIBSVM's dual has 2n variables a, a*; this one has one per row,
    beta = a - a* (Shevade et al., IEEE TNN 2000): it minimises 1/2 beta^T K beta
    + epsilon sum_i abs(beta_i) - y^T beta subject to sum beta = 0 and -C <= beta <= C, the
    same optimum with half the scans, gradient updates and kernel values. Solved by the same engine as ``KernelSVC``:
    ALFPGM (``solver='alfpgm'``, several pairs of variables per step, kernel rows computed in
    parallel) or LIBSVM's SMO (``solver='smo'``), both with shrinking and the kernel-row cache.

    Parameters
    ----------
    kernel : {'rbf', 'linear', 'poly', 'sigmoid', 'precomputed'}, default='rbf'
        As SVR's (see ``KernelSVC``).
    degree : int, default=3
    gamma : {'scale', 'auto'} or float, default='scale'
    coef0 : float, default=0.0
    tol : float, default=1e-3
        Stop when the maximal KKT violation m(a) - M(a) < tol (SVR's ``tol``).
    C : float, default=1.0
        Bound of abs(beta_i) (times the row's sample weight).
    epsilon : float, default=0.1
        Half-width of the tube in which errors cost nothing.
    shrinking : bool, default=True
    cache_size : float, default=200
        Kernel-row cache in MB, n float32 values per cached row (SVR's default and layout), or
        n float64 values where float32 cannot hold the kernel values finely enough for ``tol``
        (``KernelSVC``'s ``solver_options['row_precision']``): half the rows then.
        Memory is only taken as rows are computed; data with many support vectors gains from
        more (``docs/regression_notes.md``).
        ``KernelNuSVR``'s default is 800 MB (its SMO keeps two variables per row, each with a
        row of 2n values).
    verbose : bool, default=False
        Print a progress line about every second and when the fit ends.
    max_iter : int, default=-1
        Iteration cap (-1: the solver's default); reaching it gives a ``ConvergenceWarning``.
    solver : {'alfpgm', 'smo'}, default='alfpgm'
    n_jobs : int or None, default=None
        Threads for this estimator (None: ``budgetsvm.set_num_threads``, -1 all cores).
    solver_options : dict or None, default=None
        As ``KernelSVC``'s; ALFPGM's working sets are always solved by SMO here (``inner``
        is ignored: the augmented Lagrangian has no term for epsilon sum_i abs(beta_i)).

    Attributes
    ----------
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (rows with a_i != a_i*).
    support_vectors_ : ndarray or scipy.sparse.csr_matrix of shape (n_SV, n_features)
        Empty for a precomputed kernel.
    dual_coef_ : ndarray of shape (1, n_SV)
        a_i - a_i* of the support vectors.
    coef_ : ndarray of shape (1, n_features)
        Linear kernel only.
    intercept_ : ndarray of shape (1,)
        -rho: ``predict(x) = dual_coef_ . k(support_vectors_, x) + intercept_``.
    n_support_ : ndarray of shape (1,)
    n_iter_ : int
    dual_objective_ : float
        The dual's value at the solution (LIBSVM prints its negative as obj).
    fit_status_ : int
        0 when converged, 1 at the iteration cap.
    fit_stats_ : dict
        As ``KernelSVC``'s.
    gamma_ : float
    shape_fit_ : tuple
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from budgetsvm import KernelSVR
    >>> X = np.linspace(-3, 3, 400).reshape(-1, 1)
    >>> y = np.sin(X).ravel()
    >>> reg = KernelSVR(C=10, gamma=0.5, epsilon=0.1).fit(X, y)
    >>> bool(reg.score(X, y) > 0.95)
    True
    """

    _problem = "svr"

    epsilon: float = 0.1
    # One n-long row per data row, as the classifier's and LIBSVM's: their default.
    cache_size: float = 200
