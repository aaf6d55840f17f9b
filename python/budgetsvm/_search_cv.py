"""What the cross-validated estimators share (``KernelSVCCV``, ``KernelSVRCV``, ``BudgetSVCCV``,
``BudgetSVRCV``): the grid of C and gamma (and epsilon), the folds, successive halving over
rows, the scores and ``cv_results_`` in GridSearchCV's format, the refit, and the predictions
through the refitted model. How a round fits its candidates is the subclass's: the exact SVMs
along C paths (``kernel_cv``), the budgeted ones with a budget per round (``budget_cv``).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from scipy.stats import rankdata
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.metrics import check_scoring
from sklearn.model_selection import check_cv
from sklearn.utils import check_random_state
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from budgetsvm._docstrings import rows_doc
from budgetsvm._exact import check_c, check_epsilon
from budgetsvm._validation import (
    FitGuardedParams,
    check_choice,
    fit_guard,
    resolve_gamma,
    shown,
)

#: The Cs searched when ``Cs`` is None: 2^-2 ... 2^6, a factor 4 apart (LIBSVM's grid.py steps
#: by 4 too).
DEFAULT_CS = (0.25, 1.0, 4.0, 16.0, 64.0)
#: The gammas searched when ``gammas`` is None, as multiples of gamma='scale' on the training
#: rows (1 / (n_features X.var())), the kernel width that suits standardised features.
DEFAULT_GAMMA_FACTORS = (0.25, 1.0, 4.0)
#: How the grid is searched: every point on all folds ('grid', GridSearchCV's), successive
#: halving over rows ('halving', HalvingGridSearchCV's idea), or halving from
#: ``HALVING_FROM_ROWS`` training rows per fold ('auto').
SEARCHES = ("auto", "grid", "halving")
#: Each halving round keeps a third of the candidates and trains on three times the rows.
HALVING_FACTOR = 3
#: Training rows per fold from which search='auto' halves.
HALVING_FROM_ROWS = 2_000
#: The fewest training rows a halving round's subsample takes.
HALVING_MIN_ROWS = 300


def _values(name: str, given: Any, default: Sequence[Any], check: Any) -> List[Any]:
    """A grid axis: the given values (a non-empty sequence, each checked) or the default."""
    if given is None:
        return list(default)
    if isinstance(given, (str, bytes)) or not hasattr(given, "__len__"):
        raise ValueError(f"{name} must be a list of values, got {shown(given)}")
    values = list(given)
    if not values:
        raise ValueError(f"{name} must hold at least one value")
    for v in values:
        check(v)
    return values  # as given: best_params_ and cv_results_ show them as GridSearchCV does


def _positive_finite_c(value: Any) -> float:
    """A C of the search: > 0 and finite (a path scales by the ratio of two Cs)."""
    c = check_c(value)
    if not np.isfinite(c):
        raise ValueError("Cs must be finite (inf, the hard margin, has no path); got inf")
    return c


def _gamma(value: Any) -> Any:
    if isinstance(value, str):
        check_choice("gammas", value, ("scale", "auto"))
        return value
    if isinstance(value, bool) or not np.isscalar(value) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"gammas must be numbers > 0, 'scale' or 'auto', got {shown(value)}")
    return float(value)


class FoldRows(NamedTuple):
    """A fold's training rows in a round: X, y, their weights (or None), and the rows a fold
    trains on in that round (its ``n_resources``, the same for every fold)."""

    X: Any
    y: Any
    weights: Optional[np.ndarray]
    round_rows: int


class LastRound(NamedTuple):
    """What a subclass's last round (``SearchCV._last_round``) works with: the grid's
    candidates, the indices of those left, ``cross_validate(point,
    extra)`` (one point, with the parameters ``extra`` added, fitted on every fold's training
    rows: its scores, fit times and score times, one per fold) and the fewest training rows of
    a fold."""

    candidates: List[Dict[str, Any]]
    alive: List[int]
    cross_validate: Any
    rows: int


#: One round's fits: (scores, fit times, score times), each candidates x folds, NaN where not run.
RoundResult = Tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(kw_only=True, eq=False, repr=False)
class SearchCV(FitGuardedParams, BaseEstimator):
    """Base of the cross-validated estimators (not for direct use): the grid, the folds, the
    halving rounds, the results in GridSearchCV's format, the refit and the predictions
    through it. A subclass says which estimator it searches (``_estimator``, with
    ``_estimator_params``) and how a round fits a path's Cs (``_fit_members``)."""

    Cs: Optional[Sequence[float]] = None
    gammas: Optional[Sequence[Any]] = None
    cv: Any = None
    scoring: Any = None
    refit: bool = True
    verbose: bool = False
    n_jobs: Optional[int] = None
    search: str = "auto"
    random_state: Any = None

    #: The estimator the search fits (a subclass sets it).
    _estimator: ClassVar[Any] = None

    def _estimator_params(self) -> Dict[str, Any]:
        """The parameters of the estimator searched that are this one's."""
        raise NotImplementedError

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # every estimator searched takes CSR rows
        return tags

    def _check_search_params(self) -> None:
        """A subclass's own parameters, checked before any data."""

    def _seed(self) -> int:
        """The seed of the halving rounds' subsamples (drawn once a fit)."""
        return int(check_random_state(self.random_state).randint(0, 2**31 - 1))

    def _grid_axes(self, X: Any) -> Dict[str, List[Any]]:
        """The grid's axes by parameter name (the subclass adds its own)."""
        if self.gammas is None:
            scale = resolve_gamma("scale", X)
            gammas = [scale * f for f in DEFAULT_GAMMA_FACTORS]
        else:
            gammas = _values("gammas", self.gammas, (), _gamma)
        return {"C": _values("Cs", self.Cs, DEFAULT_CS, _positive_finite_c), "gamma": gammas}

    def _fit_members(
        self, template: Any, fixed: Dict[str, Any], Cs: List[float], fold: FoldRows
    ) -> List[Any]:
        """The models of one path (the parameters ``fixed``, its ``Cs``) on a fold's training
        rows in a round."""
        raise NotImplementedError

    def _last_round(self, last: LastRound) -> Optional[RoundResult]:
        """The last round, where a subclass runs it otherwise (None: as the others)."""
        return None

    def _refit_params(self) -> Dict[str, Any]:
        """The parameters the refit adds to ``best_params_`` (none by default)."""
        return {}

    def _before_search(self, n_train: int) -> None:
        """Called before the first round (``n_train``: the fewest training rows of a fold)."""

    def _round_started(self, rows: int) -> None:
        """Called in this process before a round's fits (``rows``: each fold's training rows
        in it): what ``_fit_members`` needs to know of the rounds is recorded here, since its
        fits may run elsewhere (``budgetsvm.dask.search``)."""

    def _after_search(self, entries: List[Tuple[int, int]]) -> None:
        """Called once ``cv_results_`` and ``best_index_`` are set, before the refit, with each
        entry's candidate index and training rows a fold (its round's ``n_resources``)."""

    @fit_guard
    def fit(
        self,
        X: Any,
        y: Any,
        sample_weight: Any = None,
        groups: Any = None,
        *,
        _callback: Optional[Callable[[int, int], Any]] = None,
        _map: Optional[TaskMap] = None,
    ) -> Any:
        """Search the grid by cross-validation, then (``refit``) fit the best point on all
        rows.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Passed to every fit (each fold's on its training rows).
        groups : array-like of shape (n_samples,), default=None
            For a group splitter given as ``cv``.

        Returns
        -------
        self

        Other Parameters
        ----------------
        _callback : callable, default=None
            For the command line: called with (fits done, fits planned) after each fit of the
            search (the plan grows where a budget search adds steps).
        _map : TaskMap, default=None
            Where the search's fits run (``budgetsvm.dask.search``: on a cluster); None: here,
            one after another.
        """
        check_choice("refit", self.refit, (True, False))
        self._check_search_params()
        template = self._estimator(**self._estimator_params())
        template._check_params()  # the estimator's own parameters, before any data
        regression = not isinstance(template, ClassifierMixin)
        X, y = validate_data(
            self, X, y, accept_sparse="csr", dtype=np.float64, order="C", y_numeric=regression
        )
        if not regression:
            check_classification_targets(y)
        weights = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if weights is not None and weights.shape != (X.shape[0],):
            raise ValueError(
                f"sample_weight has shape {weights.shape}; one weight per row of X "
                f"({X.shape[0]}) is needed"
            )
        axes = self._grid_axes(X)
        candidates, paths = _grid(axes)
        check_choice("search", self.search, SEARCHES)
        splits = list(check_cv(self.cv, y, classifier=not regression).split(X, y, groups))
        scorer = check_scoring(template, scoring=self.scoring)
        # The validation rows' weights weigh their scores where the scoring takes them
        # (GridSearchCV's rule without metadata routing).
        weigh_scores = weights is not None and _accepts_weights(scorer)
        # One seed for all rounds: each fold's order is the same in every round, so its
        # subsamples are nested.
        seed = self._seed()

        tasks = _map or LocalMap()
        data = tasks.put(X, y, weights)

        def run_round(alive: List[int], fraction: float) -> RoundResult:
            """The candidates ``alive`` on every fold, trained on the first ``fraction`` of
            each fold's training rows (in a seeded order), scored on all its validation rows:
            one task per fold and path."""
            scores = np.full((len(candidates), len(splits)), np.nan)
            fit_times = np.zeros_like(scores)
            score_times = np.zeros_like(scores)
            rng = np.random.default_rng(seed)
            rows = int(np.ceil(fraction * n_train))
            self._round_started(rows)
            jobs, where = [], []
            for k, (train, test) in enumerate(splits):
                if fraction < 1.0:
                    train = _subsample(rng.permutation(train), y, fraction, not regression)
                for fixed, members in paths:
                    members = [(c, i) for c, i in members if i in alive]
                    if members:
                        Cs = [c for c, _ in members]
                        jobs.append(
                            (
                                self,
                                template,
                                fixed,
                                Cs,
                                train,
                                test,
                                rows,
                                scorer,
                                weigh_scores,
                                *data,
                            )
                        )
                        where.append((k, len(train), fixed, members))
            done = tasks.map(_fit_path, jobs, lambda j: progress.advance(len(where[j][3])))
            for (k, n_rows, fixed, members), (scored, seconds) in zip(where, done):
                # The path's time shared by its Cs (GridSearchCV times each fit).
                share = seconds / len(members)
                for (_, i), (value, score_seconds) in zip(members, scored):
                    scores[i, k], score_times[i, k], fit_times[i, k] = value, score_seconds, share
                if self.verbose:
                    print(
                        f"[budgetsvm] fold {k + 1}/{len(splits)} on {n_rows:,} rows, "
                        f"{fixed}: C {[c for c, _ in members]} scored "
                        f"{[round(float(scores[i, k]), 4) for _, i in members]} in "
                        f"{seconds:.2f} s",
                        flush=True,
                    )
            return scores, fit_times, score_times

        def cross_validate(point: Dict[str, Any], extra: Dict[str, Any]) -> RoundResult:
            """One point on every fold's training rows (``extra``: more parameters): one task
            per fold."""
            model = clone(template).set_params(**point, **extra)
            jobs = [(model, train, test, scorer, weigh_scores, *data) for train, test in splits]
            done = tasks.map(_fit_point, jobs, lambda _: progress.advance(1))
            result = np.array(
                [[value, seconds, score_seconds] for value, seconds, score_seconds in done]
            ).T
            return result[0], result[1], result[2]

        n_train = min(len(train) for train, _ in splits)
        fractions = _halving_fractions(len(candidates), n_train, self.search)
        progress = _FitCount(_callback, len(splits), len(candidates), len(fractions))
        self._before_search(n_train)
        alive = list(range(len(candidates)))
        rounds = []
        for r, fraction in enumerate(fractions):
            last = r + 1 == len(fractions)
            result = None
            if last:
                result = self._last_round(LastRound(candidates, alive, cross_validate, n_train))
            scores, fit_times, score_times = result or run_round(alive, fraction)
            rounds.append((list(alive), fraction, scores, fit_times, score_times))
            if not last:
                mean = scores[alive].mean(axis=1)
                keep = -(-len(alive) // HALVING_FACTOR)
                # The best by mean score (ties: the earlier candidate, as rankdata's min).
                order = sorted(range(len(alive)), key=lambda j: (-mean[j], alive[j]))
                alive = sorted(alive[j] for j in order[:keep])
        for name in ("n_iterations_", "n_candidates_", "n_resources_"):
            self.__dict__.pop(name, None)  # a halving search's, from an earlier fit
        if len(rounds) == 1:
            _, _, scores, fit_times, score_times = rounds[0]
            self.cv_results_ = _cv_results(candidates, scores, fit_times, score_times)
            self.best_index_ = int(np.argmin(self.cv_results_["rank_test_score"]))
            self.best_params_ = dict(candidates[self.best_index_])
        else:
            self.cv_results_ = _halving_results(candidates, rounds, n_train)
            last_round = np.flatnonzero(self.cv_results_["iter"] == len(rounds) - 1)
            means = self.cv_results_["mean_test_score"][last_round]
            self.best_index_ = int(last_round[np.argmax(means)])
            self.best_params_ = dict(self.cv_results_["params"][self.best_index_])
            self.n_iterations_ = len(rounds)
            self.n_candidates_ = [len(alive) for alive, *_ in rounds]
            self.n_resources_ = [int(np.ceil(f * n_train)) for _, f, *_ in rounds]
        self._after_search(
            [(i, int(np.ceil(fraction * n_train))) for alive, fraction, *_ in rounds for i in alive]
        )
        self.best_score_ = float(self.cv_results_["mean_test_score"][self.best_index_])
        self.n_splits_ = len(splits)
        self.scorer_ = scorer
        self.multimetric_ = False
        self.__dict__.pop("best_estimator_", None)
        if self.refit:
            started = time.perf_counter()
            best = clone(template).set_params(**self.best_params_, **self._refit_params())
            self.best_estimator_ = best.fit(X, y, sample_weight=weights)
            self.refit_time_ = time.perf_counter() - started
        return self

    # Predictions: the refitted model's.

    def _best(self) -> Any:
        check_is_fitted(self, "best_params_")
        best = self.__dict__.get("best_estimator_")
        if best is None:
            raise AttributeError(
                f"this {type(self).__name__} was fitted with refit=False: it has no model to "
                "predict with (best_params_ says what to fit)"
            )
        return best

    def __getattr__(self, name: str) -> Any:
        # The refitted model's learned attributes (support_vectors_, dual_coef_, classes_...).
        if name.endswith("_") and not name.startswith("__"):
            best = self.__dict__.get("best_estimator_")
            if best is not None and name in vars(best):
                return getattr(best, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @rows_doc()
    def predict(self, X: Any) -> np.ndarray:
        """The refitted model's predictions."""
        return self._best().predict(X)

    def save(self, path: Any) -> None:
        """Write the refitted model to a model file (``budgetsvm.save_model``); it loads as
        the estimator searched.

        Parameters
        ----------
        path : str or path-like
            Where to write; an existing file is replaced.
        """
        self._best().save(path)


@dataclass(kw_only=True, eq=False, repr=False)
class EpsilonSearch:
    """The regressors' epsilon axis (``epsilons``, or ``[epsilon]``)."""

    epsilon: float = 0.1
    epsilons: Optional[Sequence[float]] = None

    def _grid_axes(self, X: Any) -> Dict[str, List[Any]]:
        axes = super()._grid_axes(X)  # type: ignore[misc]
        axes["epsilon"] = _values("epsilons", self.epsilons, [self.epsilon], check_epsilon)
        return axes


class _FitCount:
    """The search's progress for ``fit(_callback=...)``: fits done of those planned (every
    round's points on every fold, a third of the points kept each round; a budget search's
    steps beyond its first join the plan as they come)."""

    def __init__(self, callback: Any, n_folds: int, n_candidates: int, n_rounds: int) -> None:
        self.callback, self.done, self.planned = callback, 0, 0
        for _ in range(n_rounds):
            self.planned += n_candidates * n_folds
            n_candidates = -(-n_candidates // HALVING_FACTOR)

    def advance(self, fits: int) -> None:
        self.done += fits
        self.planned = max(self.planned, self.done)
        if self.callback is not None:
            self.callback(self.done, self.planned)


class SearchClassifierMixin(ClassifierMixin):
    """A cross-validated classifier's decision values and probabilities: its refitted
    model's (``probability``, a field of the class, says whether the refit has them)."""

    @rows_doc("ndarray", "As the refitted estimator's ``decision_function``.")
    def decision_function(self, X: Any) -> np.ndarray:
        """The refitted model's decision values."""
        return self._best().decision_function(X)  # type: ignore[attr-defined]

    @available_if(lambda self: self.probability)
    @rows_doc("ndarray of shape (n_samples, n_classes)")
    def predict_proba(self, X: Any) -> np.ndarray:
        """The refitted model's probabilities (``probability=True``)."""
        return self._best().predict_proba(X)  # type: ignore[attr-defined]

    @available_if(lambda self: self.probability)
    @rows_doc("ndarray of shape (n_samples, n_classes)")
    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The refitted model's log-probabilities (``probability=True``)."""
        return self._best().predict_log_proba(X)  # type: ignore[attr-defined]


def _accepts_weights(scorer: Any) -> bool:
    """Whether GridSearchCV would pass the validation rows' weights to this scorer: where it
    takes ``sample_weight`` (scikit-learn's scorers say; a function's signature does), in the
    scikit-learn versions that have the rule (``BaseSearchCV._check_scorers_accept_sample_weight``),
    never in those before it."""
    from sklearn.model_selection import GridSearchCV

    if not hasattr(GridSearchCV, "_check_scorers_accept_sample_weight"):
        return False
    accepts = getattr(scorer, "_accept_sample_weight", None)
    if accepts is not None:
        return bool(accepts())
    return "sample_weight" in inspect.signature(scorer).parameters


def _score(scorer: Any, model: Any, X: Any, y: Any, weights: Optional[np.ndarray]) -> float:
    try:
        if weights is not None:
            return float(scorer(model, X, y, sample_weight=weights))
        return float(scorer(model, X, y))
    except AttributeError as e:
        raise ValueError(
            f"the scoring {shown(scorer)} needs what the search's models do not have ({e}); "
            "the search fits no probabilities: use a scoring on predictions or decision values"
        ) from None


def _score_models(
    models: List[Any], scorer: Any, X: Any, y: Any, weights: Optional[np.ndarray]
) -> List[Tuple[float, float]]:
    """Each model's score on validation rows, and the seconds it took."""
    out = []
    for model in models:
        started = time.perf_counter()
        value = _score(scorer, model, X, y, weights)
        out.append((value, time.perf_counter() - started))
    return out


def _fit_path(
    search: SearchCV,
    template: Any,
    fixed: Dict[str, Any],
    Cs: List[float],
    train: np.ndarray,
    test: np.ndarray,
    rows: int,
    scorer: Any,
    weigh_scores: bool,
    X: Any,
    y: Any,
    weights: Optional[np.ndarray],
) -> Tuple[List[Tuple[float, float]], float]:
    """A search task: one path (the parameters ``fixed``, its ``Cs``) fitted on a fold's
    training rows ``train`` and scored on its validation rows ``test``; the scores with their
    seconds, and the path's fit seconds. Only the indices travel: the rows are sliced where the
    task runs."""
    started = time.perf_counter()
    w = None if weights is None else weights[train]
    models = search._fit_members(template, fixed, Cs, FoldRows(X[train], y[train], w, rows))
    seconds = time.perf_counter() - started
    test_w = weights[test] if weigh_scores and weights is not None else None
    return _score_models(models, scorer, X[test], y[test], test_w), seconds


def _fit_point(
    model: Any,
    train: np.ndarray,
    test: np.ndarray,
    scorer: Any,
    weigh_scores: bool,
    X: Any,
    y: Any,
    weights: Optional[np.ndarray],
) -> Tuple[float, float, float]:
    """A search task: one unfitted ``model`` fitted on a fold's training rows and scored on its
    validation rows: the score, the fit's seconds and the score's."""
    started = time.perf_counter()
    model = clone(model).fit(
        X[train], y[train], sample_weight=None if weights is None else weights[train]
    )
    seconds = time.perf_counter() - started
    test_w = weights[test] if weigh_scores and weights is not None else None
    ((value, score_seconds),) = _score_models([model], scorer, X[test], y[test], test_w)
    return value, seconds, score_seconds


class TaskMap:
    """Where a search's tasks run: ``put`` hands the data to it once (what the tasks then get
    in its place), ``map`` runs ``fn(*args)`` for each of ``jobs`` and returns the results in
    order, calling ``done(j)`` as job j finishes."""

    def put(self, X: Any, y: Any, weights: Optional[np.ndarray]) -> Tuple[Any, Any, Any]:
        raise NotImplementedError

    def map(
        self, fn: Callable[..., Any], jobs: List[tuple], done: Callable[[int], Any]
    ) -> List[Any]:
        raise NotImplementedError


class LocalMap(TaskMap):
    """The tasks in this process, one after another, in order."""

    def put(self, X: Any, y: Any, weights: Optional[np.ndarray]) -> Tuple[Any, Any, Any]:
        return X, y, weights

    def map(
        self, fn: Callable[..., Any], jobs: List[tuple], done: Callable[[int], Any]
    ) -> List[Any]:
        out = []
        for j, args in enumerate(jobs):
            out.append(fn(*args))
            done(j)
        return out


def _halving_fractions(n_candidates: int, n_train: int, search: str) -> List[float]:
    """The share of each fold's training rows every round trains on: one round of all rows
    for 'grid' (and 'auto' below ``HALVING_FROM_ROWS`` training rows), else rounds that keep a
    third of the candidates each, until one is left, on three times the rows each, the last
    on all rows (it gives the choice its score); the first on at least ``HALVING_MIN_ROWS``
    rows (fewer rounds, more candidates in the last, where the rows are too few)."""
    if search == "grid" or (search == "auto" and n_train < HALVING_FROM_ROWS):
        return [1.0]
    rounds, left = 1, n_candidates
    while left > 1:
        left = -(-left // HALVING_FACTOR)
        rounds += 1
    while rounds > 1 and n_train / HALVING_FACTOR ** (rounds - 1) < HALVING_MIN_ROWS:
        rounds -= 1
    return [float(HALVING_FACTOR) ** -(rounds - 1 - r) for r in range(rounds)]


def _subsample(order: np.ndarray, y: np.ndarray, fraction: float, by_class: bool) -> np.ndarray:
    """The first ``fraction`` of the rows ``order`` (a seeded permutation of a fold's training
    rows, the same in every round, so the subsamples are nested); of each class on its own
    where ``by_class``, at least one row of every class the fold has (a rare class would
    otherwise leave a round's subsample with one class, which no classifier fits)."""
    if not by_class:
        return order[: max(2, int(np.ceil(fraction * len(order))))]
    labels = y[order]
    keep = np.zeros(len(order), dtype=bool)
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        keep[rows[: max(1, int(np.ceil(fraction * len(rows))))]] = True
    return order[keep]


def _halving_results(
    candidates: List[Dict[str, Any]], rounds: List[Tuple[Any, ...]], n_train: int
) -> Dict[str, Any]:
    """HalvingGridSearchCV's ``cv_results_``: GridSearchCV's keys over the rounds' entries
    (each round's candidates in grid order), with ``iter`` and ``n_resources``."""
    parts = []
    for r, (alive, fraction, scores, fit_times, score_times) in enumerate(rounds):
        part = _cv_results(
            [candidates[i] for i in alive], scores[alive], fit_times[alive], score_times[alive]
        )
        part["iter"] = np.full(len(alive), r)
        part["n_resources"] = np.full(len(alive), int(np.ceil(fraction * n_train)))
        parts.append(part)
    results: Dict[str, Any] = {}
    for key in parts[0]:
        if key == "params":
            results[key] = [p for part in parts for p in part[key]]
        elif key.startswith("param_"):
            results[key] = np.ma.concatenate([part[key] for part in parts])
        elif key != "rank_test_score":
            results[key] = np.concatenate([part[key] for part in parts])
    # Ranked over all entries, as HalvingGridSearchCV ranks (the choice is the last round's).
    mean = results["mean_test_score"]
    results["rank_test_score"] = rankdata(-mean, method="min").astype(np.int32)
    return {key: results[key] for key in list(parts[0]) + ["iter", "n_resources"]}


def _grid(
    axes: Dict[str, List[Any]],
) -> Tuple[List[Dict[str, Any]], List[Tuple[Dict[str, Any], List[Tuple[float, int]]]]]:
    """The candidates in ParameterGrid's order (names sorted, the last one varying fastest),
    and the paths: for each value of the other parameters, its Cs with their candidates'
    indices."""
    names = sorted(axes)
    shape = [len(axes[name]) for name in names]
    # A grid without C (nu-SVC) has a path per point, its C None.
    along = "C" if "C" in axes else None
    candidates = []
    paths: Dict[Tuple[int, ...], List[Tuple[Any, int]]] = {}
    for i, at in enumerate(np.ndindex(*shape)):
        point = {name: axes[name][j] for name, j in zip(names, at)}
        candidates.append(point)
        others = tuple(j for name, j in zip(names, at) if name != along)
        paths.setdefault(others, []).append((point.get("C"), i))
    fixed = [name for name in names if name != along]
    return candidates, [
        ({name: axes[name][j] for name, j in zip(fixed, key)}, members)
        for key, members in paths.items()
    ]


def _cv_results(
    candidates: List[Dict[str, Any]],
    scores: np.ndarray,
    fit_times: np.ndarray,
    score_times: np.ndarray,
) -> Dict[str, Any]:
    """GridSearchCV's ``cv_results_`` (test scores only): its keys, dtypes and ranks."""
    results: Dict[str, Any] = {
        "mean_fit_time": fit_times.mean(axis=1),
        "std_fit_time": fit_times.std(axis=1),
        "mean_score_time": score_times.mean(axis=1),
        "std_score_time": score_times.std(axis=1),
    }
    for name in sorted(candidates[0]):
        values = np.ma.MaskedArray(np.empty(len(candidates), dtype=object), mask=False)
        for i, point in enumerate(candidates):
            values[i] = point[name]
        results[f"param_{name}"] = values
    results["params"] = candidates
    for k in range(scores.shape[1]):
        results[f"split{k}_test_score"] = scores[:, k]
    mean = scores.mean(axis=1)
    results["mean_test_score"] = mean
    results["std_test_score"] = scores.std(axis=1)
    results["rank_test_score"] = rankdata(-mean, method="min").astype(np.int32)
    return results
