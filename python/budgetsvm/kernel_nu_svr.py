"""The exact kernel nu-SVR (LIBSVM's nu formulation, ALFPGM or WSS2 SMO in Rust), a drop-in for
scikit-learn's NuSVR."""

from __future__ import annotations

from dataclasses import dataclass

from budgetsvm._exact import ExactRegressor

__all__ = ["KernelNuSVR"]


@dataclass(kw_only=True, eq=False, repr=False)
class KernelNuSVR(ExactRegressor):
    """Exact nu-support vector regression with any of NuSVR's kernels.

    Solves scikit-learn's ``NuSVR`` problem (LIBSVM's nu-SVR, Schoelkopf et al. 2000): the dual
    of epsilon-SVR in the 2n variables a, a* with the tube's width left to the solver,
    min 1/2 (a - a*)^T K (a - a*) - y^T (a - a*) subject to sum (a - a*) = 0,
    sum (a + a*) = C nu sum_i w_i and 0 <= a_i, a_i* <= C w_i, to the tolerance ``tol`` on each
    label's maximal KKT violation, by the engine of ``KernelSVR`` (LIBSVM's ``Solver_NU``: every
    step moves two variables of one label). ALFPGM keeps a row's a_i and a_i* together (one
    gradient, one kernel row and one scan entry per data row, where LIBSVM's form takes two);
    SMO takes LIBSVM's 2n variables and steps. nu is an upper bound on the fraction of errors
    (rows outside the tube) and a lower bound on the fraction of support vectors.

    Parameters
    ----------
    nu : float, default=0.5
        In (0, 1].
    C : float, default=1.0
        Upper bound of a_i and a_i* (times the row's sample weight); finite (the dual fixes
        sum(a + a*) = C nu sum_i w_i, which an infinite C makes infinite: ValueError).
    cache_size : float, default=800
        Kernel-row cache in MB, taken only as rows are computed. ALFPGM caches a row of n
        float32 values per data row; SMO one of 2n values per variable (two per data row), so
        800 MB hold there as many data rows as ``KernelSVR``'s 200 MB.
    kernel, degree, gamma, coef0, tol, shrinking, verbose, max_iter, solver, n_jobs
        As ``KernelSVR``'s.
    solver_options : dict or None, default=None
        As ``KernelSVR``'s (nu problems always solve ALFPGM's working sets by SMO), but
        ``n_pairs`` defaults to 100: twice the pairs per working set, a third of the working
        sets, each of which scans all rows and fetches its rows (faster on fried and puma8nh,
        slower on lowbwt: ``docs/regression_notes.md``).

    Attributes
    ----------
    As ``KernelSVR``'s.

    Examples
    --------
    >>> from sklearn.datasets import make_friedman1
    >>> from budgetsvm import KernelNuSVR
    >>> X, y = make_friedman1(500, noise=0.5, random_state=0)
    >>> reg = KernelNuSVR(C=100, nu=0.3, gamma=0.2)
    >>> bool(reg.fit(X, y).score(X, y) > 0.9)
    True
    >>> bool(len(reg.support_) >= 0.3 * len(X))  # nu bounds the share of support vectors
    True
    """

    _problem = "nu_svr"
    _default_pairs = 100

    nu: float = 0.5
