"""The exact kernel nu-SVR (LIBSVM's nu formulation, ALFPGM or WSS2 SMO in Rust), a drop-in for
scikit-learn's NuSVR."""

from __future__ import annotations

from typing import Any, Dict, Optional

from budgetsvm._exact import check_c, check_nu
from budgetsvm.kernel_svr import KernelSVR

__all__ = ["KernelNuSVR"]


class KernelNuSVR(KernelSVR):
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
    kernel, degree, gamma, coef0, tol, shrinking, cache_size, verbose, max_iter, solver, n_jobs, solver_options
        As ``KernelSVR``'s (nu problems always solve ALFPGM's working sets by SMO).

    Attributes
    ----------
    As ``KernelSVR``'s.

    Examples
    --------
    >>> import numpy as np
    >>> from budgetsvm import KernelNuSVR
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(400, 1))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=400)
    >>> reg = KernelNuSVR(C=10, gamma=0.5, nu=0.3).fit(X, y)
    >>> bool(reg.score(X, y) > 0.9)
    True
    """

    _problem = "nu_svr"

    def __init__(
        self,
        nu: float = 0.5,
        C: float = 1.0,
        kernel: str = "rbf",
        degree: int = 3,
        gamma: Any = "scale",
        coef0: float = 0.0,
        shrinking: bool = True,
        tol: float = 1e-3,
        cache_size: float = 800,
        verbose: bool = False,
        max_iter: int = -1,
        solver: str = "alfpgm",
        n_jobs: Optional[int] = None,
        solver_options: Optional[dict] = None,
    ) -> None:
        self.nu = nu
        self.C = C
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.shrinking = shrinking
        self.tol = tol
        self.cache_size = cache_size
        self.verbose = verbose
        self.max_iter = max_iter
        self.solver = solver
        self.n_jobs = n_jobs
        self.solver_options = solver_options

    def _problem_params(self) -> Dict[str, Any]:
        return dict(c=check_c(self.C), nu=check_nu(self.nu))
