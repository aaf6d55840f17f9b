"""The exact one-class SVM (ALFPGM or WSS2 SMO in Rust), a drop-in for scikit-learn's
OneClassSVM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import OutlierMixin

from budgetsvm._docstrings import rows_doc
from budgetsvm._exact import SingleOutputMachine
from budgetsvm._validation import fit_guard, fitted_snapshot

__all__ = ["KernelOneClassSVM"]


@dataclass(kw_only=True, eq=False, repr=False)
class KernelOneClassSVM(OutlierMixin, SingleOutputMachine):
    """Exact one-class SVM (novelty detection), nu formulation, with any of SVC's kernels.

    Solves scikit-learn's ``OneClassSVM`` problem (Schoelkopf et al. 2001; LIBSVM's one-class):
    min 1/2 a^T K a subject to sum a = nu n and 0 <= a_i <= 1, to the tolerance ``tol``, by the
    engine of ``KernelSVC`` (ALFPGM or SMO, shrinking, the kernel-row cache), started from LIBSVM's
    feasible point (the first nu n rows at their bound). The decision function
    sum_i a_i k(x_i, x) - rho is positive inside the estimated support of the data.

    Parameters
    ----------
    kernel : {'rbf', 'linear', 'poly', 'sigmoid', 'precomputed'}, default='rbf'
    degree : int, default=3
    gamma : {'scale', 'auto'} or float, default='scale'
    coef0 : float, default=0.0
    tol : float, default=1e-3
    nu : float, default=0.5
        In (0, 1]: an upper bound on the fraction of training errors (rows outside) and a lower
        bound on the fraction of support vectors.
    shrinking : bool, default=True
    cache_size : float, default=200
    verbose : bool, default=False
    max_iter : int, default=-1
    solver : {'alfpgm', 'smo'}, default='alfpgm'
    n_jobs : int or None, default=None
    solver_options : dict or None, default=None
        As ``KernelSVC``'s.

    Attributes
    ----------
    support_, support_vectors_, dual_coef_, n_support_, n_iter_, dual_objective_, fit_status_,
    fit_stats_, gamma_, shape_fit_, n_features_in_ :
        As ``KernelSVR``'s (``dual_coef_`` holds the a_i, in (0, 1]).
    intercept_ : ndarray of shape (1,)
        -rho.
    offset_ : float
        rho: ``decision_function = score_samples - offset_``, as OneClassSVM's.
    coef_ : ndarray of shape (1, n_features)
        Linear kernel only.

    Examples
    --------
    >>> import numpy as np
    >>> from budgetsvm import KernelOneClassSVM
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 2))
    >>> det = KernelOneClassSVM(nu=0.1, gamma=0.5).fit(X)
    >>> bool(abs((det.predict(X) == -1).mean() - 0.1) < 0.05)
    True
    """

    _problem = "one_class"

    nu: float = 0.5

    @fit_guard
    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> KernelOneClassSVM:
        """Learn the support of the rows X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Dense or sparse (the Gram matrix for a precomputed kernel).
        y : ignored
        sample_weight : array-like of shape (n_samples,), default=None
            Per-row bound of a_i (and their sum nu * sum(sample_weight)), as OneClassSVM's;
            rows of weight 0 are left out.

        Returns
        -------
        self : KernelOneClassSVM
        """
        params = self._check_params()
        X = self._validate_fit(X)
        self._fit_single(X, None, sample_weight, **params)
        self.offset_ = float(-self.intercept_[0])
        return self

    def _infinite_intercept_hint(self) -> str:
        return (
            f"nu={self.nu} puts every row at its bound, so no row lies on the boundary and rho "
            "is unbounded; use a smaller nu"
        )

    @rows_doc()
    @fitted_snapshot
    def decision_function(self, X: Any) -> np.ndarray:
        """Signed distance to the boundary: positive inside (inliers), negative outside."""
        return self._decision(X)

    @rows_doc()
    @fitted_snapshot
    def score_samples(self, X: Any) -> np.ndarray:
        """sum_i a_i k(x_i, x), the unshifted score (``decision_function + offset_``)."""
        return self._decision(X) + self.offset_

    @rows_doc()
    @fitted_snapshot
    def predict(self, X: Any) -> np.ndarray:
        """+1 for inliers (decision value > 0), -1 for outliers, as OneClassSVM."""
        return np.where(self._decision(X) > 0, 1, -1)
