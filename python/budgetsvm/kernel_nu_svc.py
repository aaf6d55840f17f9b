"""The exact kernel nu-SVC (LIBSVM's nu formulation, ALFPGM or WSS2 SMO in Rust), a drop-in for
scikit-learn's NuSVC."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

import numpy as np

from budgetsvm._exact import ExactClassifier
from budgetsvm._validation import TrainingRows, check_sample_weight, class_weights, training_rows

__all__ = ["KernelNuSVC"]


@dataclass(kw_only=True, eq=False, repr=False)
class KernelNuSVC(ExactClassifier):
    """Exact nu-SVC with any of NuSVC's kernels, trained by ALFPGM or by WSS2 SMO.

    Solves scikit-learn's ``NuSVC`` problem (LIBSVM's nu-SVC, Schoelkopf et al. 2000): per
    class pair min_a 1/2 a^T Q a subject to y^T a = 0, e^T a = nu sum_i w_i and
    0 <= a_i <= w_i (w the sample weights, 1 without), to the tolerance ``tol`` on each label's
    maximal KKT violation, on the engine of ``KernelSVC`` (LIBSVM's ``Solver_NU``: every step
    moves two variables of one label, shrinking and the kernel-row cache as for C-SVC). The
    solution divided by the sum's multiplier r is the C-SVC solution of C = 1 / r, which is
    what ``dual_coef_`` and ``intercept_`` hold, as NuSVC's. nu is an upper bound on the
    fraction of margin errors and a lower bound on the fraction of support vectors.

    Parameters
    ----------
    nu : float, default=0.5
        In (0, 1]. A nu above 2 min(n_a, n_b) / (n_a + n_b) for the (weighted) sizes of some
        class pair has no feasible point: ``fit`` raises ValueError("specified nu is
        infeasible ...") naming the pair.
    kernel, degree, gamma, coef0, shrinking, probability, tol, cache_size, verbose, max_iter, decision_function_shape, break_ties, random_state, solver, n_jobs, solver_options
        As ``KernelSVC``'s (nu problems always solve ALFPGM's working sets by SMO: the
        augmented Lagrangian of ``solver_options={'inner': 'fista'}`` handles one equality).
        With ``probability=True`` the internal cross-validation's folds are stratified by
        class, and a fold on which nu is infeasible (a class's share a row smaller than in
        the whole set) is fitted just below its largest feasible nu.
    class_weight : dict, 'balanced' or None, default=None
        Accepted as NuSVC accepts it, and reported in ``class_weight_``; as in scikit-learn
        (LIBSVM's nu-SVC has no C for it to scale) it does not change the problem. Weigh rows
        with ``sample_weight``.

    Attributes
    ----------
    As ``KernelSVC``'s; ``fit_stats_['r']`` holds each class pair's r. A pair the kernel does
    not separate at all at this nu (labels unrelated to the rows) has a margin of 0, r = 0 to
    within ``tol``: its coefficients stay unscaled (C = 1), which predicts as any positive
    scale does, where dividing by the rounding noise would blow them up or flip their sign.
    Beyond ``tol`` r is divided by whatever its sign, as NuSVC does: a kernel that is not
    positive semi-definite (a sigmoid kernel, a precomputed or callable one) can make r
    negative, and the predictions are then NuSVC's.

    Examples
    --------
    >>> import numpy as np
    >>> from budgetsvm import KernelNuSVC
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(500, 2))
    >>> y = (X[:, 0] * X[:, 1] > 0).astype(int)
    >>> clf = KernelNuSVC(nu=0.2, gamma=2.0).fit(X, y)
    >>> bool(clf.n_support_.sum() >= 0.2 * len(X))  # nu bounds the share of support vectors
    True
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    _problem = "nu_svc"

    nu: float = 0.5

    def _training_rows(self, X: Any, y: Any, sample_weight: Any) -> TrainingRows:
        if sample_weight is not None:
            w = check_sample_weight(sample_weight, X.shape[0], negative_allowed=True)
            left = np.unique(np.asarray(y)[w > 0])
            if len(left) == 1:
                # As NuSVC: one class cannot meet nu's share of the other.
                raise ValueError(
                    "specified nu is infeasible: the rows with a positive sample weight all "
                    f"belong to class {left[0]!r}"
                )
        rows = training_rows(type(self).__name__, X, y, sample_weight, None)
        per_class = class_weights(self.class_weight, rows.classes, rows.y_index, rows.weights)
        return rows._replace(class_weights=per_class)

    def _fold_params(self, labels: np.ndarray, weights: Any) -> Dict[str, Any]:
        # A fold of the internal cross-validation of probability=True may hold a class's rows
        # in a slightly smaller share than the whole set (stratified folds deal them out whole
        # rows at a time): a nu feasible on the set, near its largest, can then be infeasible
        # on the fold. The fold takes just below its largest feasible nu instead (at the largest
        # itself one label has every variable at its bound, and r no value). LIBSVM solves
        # such a fold from an infeasible start, whose sigmoid comes out flat (probA_ = 0).
        totals = np.bincount(labels, weights=weights)
        totals = totals[totals > 0]
        small, large = np.meshgrid(totals, totals)
        pairs = np.triu_indices(len(totals), k=1)
        largest = np.min(2 * np.minimum(small, large)[pairs] / (small + large)[pairs])
        return {"nu": min(float(self.nu), 0.999 * largest)}

