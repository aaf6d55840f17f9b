"""The exact kernel nu-SVR (LIBSVM's nu formulation, ALFPGM or WSS2 SMO in Rust), a drop-in for
scikit-learn's NuSVR."""

from __future__ import annotations

from dataclasses import dataclass

from budgetsvm.kernel_svr import ExactRegressor

__all__ = ["KernelNuSVR"]


@dataclass(kw_only=True, eq=False, repr=False)
class KernelNuSVR(ExactRegressor):
    """Exact nu-support vector regression with any of NuSVR's kernels.

    Solves scikit-learn's ``NuSVR`` problem (LIBSVM's nu-SVR, Schoelkopf et al. 2000): the dual
    of epsilon-SVR in the 2n variables a, a* with the tube's width left to the solver,
    min 1/2 (a - a*)^T K (a - a*) - y^T (a - a*) subject to sum (a - a*) = 0,
    sum (a + a*) = C nu sum_i w_i and 0 <= a_i, a_i* <= C w_i, to the tolerance ``tol`` on each
    label's maximal KKT violation, by the engine of ``KernelSVR`` (LIBSVM's ``Solver_NU``: every
    step moves two variables of one label). nu is an upper bound on the fraction of errors
    (rows outside the tube) and a lower bound on the fraction of support vectors.

    Parameters
    ----------
    nu : float, default=0.5
        In (0, 1].
    C : float, default=1.0
        Upper bound of a_i and a_i* (times the row's sample weight); inf is allowed.
    cache_size : float, default=800
        Kernel-row cache in MB. The dual has two variables per row, each cached with a row of
        2n float32 values: 800 MB hold as many data rows as ``KernelSVR``'s 200 MB.
    kernel, degree, gamma, coef0, tol, shrinking, verbose, max_iter, solver, n_jobs
        As ``KernelSVR``'s.
    solver_options : dict or None, default=None
        As ``KernelSVR``'s (nu problems always solve ALFPGM's working sets by SMO), but
        ``n_pairs`` defaults to 100: twice the pairs per working set, half the working sets,
        each of which scans all 2n variables and fetches its rows (fried, 32,614 rows,
        ``C=10, nu=0.5``, alternated: 105.6-109.9 -> 89.0-92.8 s; puma8nh 1.85-2.19 ->
        1.69-1.95 s; lowbwt 9.7-12.3 against 10.6-11.8 s; R^2 the same to 1e-4).

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
