"""The exact kernel SVC (ALFPGM or WSS2 SMO in Rust), a drop-in for scikit-learn's SVC."""

from __future__ import annotations

from dataclasses import dataclass

# ExactClassifier, KernelSVC's base, lives with the other exact bases in _exact; imported here,
# it stays importable from this module, its home before.
from budgetsvm._exact import ALFPGM_OPTIONS, SHARED_OPTIONS, SOLVERS, ExactClassifier

__all__ = ["KernelSVC", "ALFPGM_OPTIONS", "SHARED_OPTIONS", "SOLVERS"]


@dataclass(kw_only=True, eq=False, repr=False)
class KernelSVC(ExactClassifier):
    """Exact C-SVC with any of SVC's kernels, trained by ALFPGM or by WSS2 SMO.

    Solves the same problem as scikit-learn's ``SVC`` (LIBSVM): the dual
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
    kernel : {'rbf', 'linear', 'poly', 'sigmoid', 'precomputed'} or callable, default='rbf'
        As SVC's: exp(-gamma ||x - x'||^2), x.x', (gamma x.x' + coef0)^degree,
        tanh(gamma x.x' + coef0), or a precomputed Gram matrix: ``fit`` then takes the
        n_samples x n_samples kernel matrix of the training rows, ``predict`` the
        n_test x n_train matrix of the test rows against them (dense). Every kernel runs through
        the same kernel-row cache and blocked prediction (dot products, then the kernel's
        function). A callable ``k(A, B) -> (len(A), len(B)) array`` gets X as given (any
        sequence it accepts: strings, records): where n_samples^2 float64 values fit
        ``cache_size``, ``fit`` calls it once on the training rows and solves its matrix as a
        precomputed kernel; beyond, the engine calls it for the blocks of rows its solvers ask
        for, ``k(X[rows], X)``, and keeps ``cache_size`` of them (every class pair reads the
        same store; ``probability=True``'s folds too), so the whole matrix is never formed.
        ``predict`` calls it against the support rows only. Such a model pickles (with an importable function) but cannot be
        saved to a model file.
    degree : int, default=3
        Degree of the 'poly' kernel.
    gamma : {'scale', 'auto'} or float, default='scale'
        Kernel coefficient of 'rbf', 'poly' and 'sigmoid'; 'scale' is
        1 / (n_features * X.var()), 'auto' 1 / n_features.
    coef0 : float, default=0.0
        Constant term of the 'poly' and 'sigmoid' kernels.
    solver : {'alfpgm', 'smo'}, default='alfpgm'
        ALFPGM (many pairs per step) or LIBSVM's WSS2 SMO. On a kernel that is not positive
        semi-definite (sigmoid; poly with coef0 < 0; a precomputed or callable matrix with a
        negative eigenvalue) the dual is not convex and the model depends on the path: 'alfpgm'
        then runs SMO, whose path is LIBSVM's, and ``fit_stats_['solver']`` says so.
    shrinking : bool, default=True
        As SVC's: variables at a bound that cannot enter a violating pair leave the active set
        (steps then select, update and compute kernel rows over the active variables only);
        their gradient is reconstructed before the final optimality test, so the solution and
        the stopping rule are those without shrinking.
    tol : float, default=1e-3
        Stop when m(a) - M(a) < tol (SVC's ``tol``).
    cache_size : float, default=200
        Kernel-row cache in MB per class-pair problem (as SVC's ``cache_size``; rows are float32
        like LIBSVM's, so the same size holds the same number of rows). Where float32 cannot
        hold the kernel values finely enough for ``tol`` (largest k(x, x) times C times 2^-24
        above ``tol``: a polynomial or linear kernel on unscaled data, a very large C) the rows
        are float64 and the same size holds half as many (``solver_options['row_precision']``).
    max_iter : int, default=-1
        Cap on the pair steps per class pair, as SVC's (LIBSVM's iterations; ALFPGM counts the
        SMO steps inside its working sets); -1 is max(10^7, 100 n), LIBSVM's. Reaching it gives
        a ``ConvergenceWarning``.
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
    break_ties : bool, default=False
        As in SVC: with 'ovr' and more than two classes, ``predict`` takes the argmax of
        ``decision_function`` (votes with the confidences breaking ties) instead of the plain
        one-vs-one vote.
    solver_options : dict or None, default=None
        Solver internals, for experiments (the defaults are the measured best; see
        ``docs/alfpgm_notes.md``). For both solvers:

        - ``shared_rows`` (True): with more than two classes, the class pairs take their
          kernel rows from one store of ``cache_size`` shared by all pairs, where the part of a
          row against the row's own class is computed once for every pair the row is in.
          False gives each pair kernel rows of its own only, like LIBSVM.
        - ``row_precision`` ('auto'): the kernel rows' type. 'auto' keeps float32 rows (as
          LIBSVM) unless float32's rounding of a kernel value, 2^-24 of the largest k(x, x),
          times the largest bound C (times the row weight) exceeds ``tol``, and takes float64
          rows then (twice the bytes a row: ``cache_size`` holds half the rows); 'float32' and
          'float64' force one. ``fit_stats_['row_precision']`` says which a fit took.

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
        CSR for sparse input (as SVC), so nothing of size n_features is made per vector; empty
        for a precomputed kernel.
    n_support_ : ndarray of shape (n_classes,)
        Support vectors per class.
    dual_coef_ : ndarray of shape (n_classes - 1, n_SV)
        y_i a_i in SVC's layout (for two classes, positive for ``classes_[1]``).
    intercept_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
    coef_ : ndarray or scipy.sparse.csr_matrix of shape (n_classes * (n_classes - 1) / 2, n_features)
        Weights in the input space, one row per class pair (linear kernel only, as SVC).
    gamma_ : float
    shape_fit_ : tuple
        Shape of the training X.
    n_iter_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
        Pair steps per class pair, as SVC's (ALFPGM: the SMO steps inside its working sets;
        ``fit_stats_['working_sets']`` counts the sets).
    dual_objective_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
        D(a) = e^T a - 1/2 a^T Q a per class pair (LIBSVM prints obj = -D).
    fit_stats_ : dict
        Per-pair KKT gap, convergence flags and smallest active set (``min_active``, shrinking),
        ALFPGM's working sets, SMO fallback steps and inner iterations, kernel-row cache
        hits/misses, kernel values computed (``kernel_values``; a full row is n of them) and the
        seconds spent computing kernel rows, the rows' type (``row_precision``: 'float32' or
        'float64'), the strides taken (``strides``: jumps along the last 1,000 steps' direction
        to the first bound, taken where that range calls for float64 rows), total seconds.
    n_features_in_ : int
    class_weight_ : ndarray of shape (n_classes,)
    probA_, probB_ : ndarray of shape (n_classes * (n_classes - 1) / 2,)
        With ``probability=True``: the sigmoid 1 / (1 + exp(A d + B)) of each class pair, d its
        one-vs-one decision value (positive for the pair's first class), as SVC.

    Examples
    --------
    >>> from sklearn.datasets import make_moons
    >>> from budgetsvm import KernelSVC
    >>> X, y = make_moons(500, noise=0.1, random_state=0)
    >>> clf = KernelSVC(C=10, gamma=2.0).fit(X, y)
    >>> clf.predict([[-1.0, 0.5], [2.0, 0.0]])
    array([0, 1])
    >>> bool(clf.score(X, y) > 0.95)
    True
    """

    _problem = "svc"

    C: float = 1.0
