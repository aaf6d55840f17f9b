"""What the budgeted estimators (BudgetSVC, BudgetSVR) share: the parameters of the budgeted
pass and of the polish, the native runs (BSGD / BSCA, the polish, a BSGD stream), the fitted
expansion and its decision values. A budgeted estimator is this base plus its targets: how
labels or values become the engine's targets, and what the decision values mean."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from budgetsvm import _budgetsvm
from budgetsvm._validation import (
    SV_STORAGES,
    FitGuardedParams,
    check_choice,
    check_n_jobs,
    check_nonnegative,
    check_positive,
    resolve_gamma,
    scale_gamma,
    shown,
    sv_from_native,
    to_native,
)
from budgetsvm.modelfile import ModelFileMixin

SOLVERS = ("bsgd", "bsca")
MAINTENANCE = ("merge", "remove", "project")
DUAL_STEPS = ("decaying", "full")
MERGE_SEARCHES = ("lookup-wd", "lookup-h", "gss", "gss-precise")

Callback = Optional[Callable[[Dict[str, Any]], Any]]


@dataclass(kw_only=True, eq=False, repr=False)
class BudgetedRunParams:
    """The parameters of the budgeted pass and of the polish, as keyword-only dataclass fields
    (as ``ExactKernelMachine`` explains): the budgeted estimators' and, for every fit of their
    searches, ``BudgetSVCCV``'s and ``BudgetSVRCV``'s."""

    solver: str = "bsgd"
    maintenance: str = "merge"
    merge: str = "lookup-wd"
    epochs: int = 5
    average: bool = True
    lam: Optional[float] = None
    shuffle: bool = True
    dual_step: str = "decaying"
    sv_storage: str = "auto"
    polish: bool = True
    polish_tol: float = 1e-5
    polish_max_iter: int = 50
    polish_cache_size: float = 1024.0


@dataclass(kw_only=True, eq=False, repr=False)
class BudgetedMachine(BudgetedRunParams, FitGuardedParams, ModelFileMixin, BaseEstimator):
    """Base of the budgeted estimators (not for direct use): the model's C, gamma and budget
    and the run's parameters; a subclass adds its own and may change a default (BudgetSVR:
    BSCA, no averaging)."""

    C: float = 1.0
    gamma: Any = "scale"
    budget: Any = 100
    random_state: Any = None
    verbose: bool = False
    n_jobs: Optional[int] = None

    # Regression passes its epsilon to the engine; classification None.
    def _epsilon(self) -> Optional[float]:
        return None

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _check_budget_params(self) -> None:
        check_positive("C", self.C)
        if isinstance(self.gamma, str):
            check_choice("gamma", self.gamma, ("scale", "auto"))
        else:
            check_positive("gamma", self.gamma)
        if self.lam is not None:
            check_positive("lam", self.lam)
        if isinstance(self.budget, str):
            check_choice("budget", self.budget, ("auto",))
        else:
            check_positive("budget", self.budget, integer=True, minimum=2)
        check_positive("epochs", self.epochs, integer=True, minimum=1)
        check_choice("solver", self.solver, SOLVERS)
        check_choice("maintenance", self.maintenance, MAINTENANCE)
        check_choice("merge", self.merge, MERGE_SEARCHES)
        check_choice("average", self.average, (True, False))
        check_choice("shuffle", self.shuffle, (True, False))
        check_choice("dual_step", self.dual_step, DUAL_STEPS)
        check_choice("sv_storage", self.sv_storage, SV_STORAGES)
        check_n_jobs(self.n_jobs)
        check_choice("polish", self.polish, (True, False))
        self._check_polish_params()

    def _streams(self, use: str) -> bool:
        """Whether ``use`` (partial_fit, fit_file: a BSGD run continued batch by batch) exists
        for these settings; with ``budget='auto'`` it says why not (available_if's message)."""
        if isinstance(self.budget, str):
            raise AttributeError(
                f"{use} needs an integer budget: budget='auto' chooses one by fitting on rows "
                "in memory (fit); set budget to a number (e.g. budget_ of such a fit)"
            )
        return self.solver == "bsgd"

    def _fit_auto_budget(
        self,
        X: Any,
        y: np.ndarray,
        weights: Optional[np.ndarray],
        seed: int,
        classify: bool,
        fit_params: Dict[str, Any],
    ) -> None:
        """``budget='auto'`` on validated rows (those of weight 0 left out) and their weights
        (``budgetsvm._budget_search``): the chosen fit's attributes become this estimator's,
        ``budget_`` its budget, and ``fit_stats_['budget_search']`` records the search."""
        from budgetsvm._budget_search import search_budget

        chosen, record = search_budget(self, X, y, weights, seed, classify, fit_params)
        params = set(self.get_params())
        for name, value in vars(chosen).items():
            if name not in params:
                setattr(self, name, value)
        self.budget_ = record["budget"]
        self.fit_stats_ = {**self.fit_stats_, "budget_search": record}

    def _check_polish_params(self) -> None:
        check_nonnegative("polish_tol", self.polish_tol)
        check_positive("polish_max_iter", self.polish_max_iter, integer=True, minimum=1)
        check_nonnegative("polish_cache_size", self.polish_cache_size)

    def _seed(self) -> int:
        if isinstance(self.random_state, (int, np.integer)) and not isinstance(
            self.random_state, bool
        ):
            if not 0 <= self.random_state < 2**64:
                raise ValueError(
                    f"random_state must be an integer in [0, 2**64), got {shown(self.random_state)}"
                )
            return int(self.random_state)
        return int(check_random_state(self.random_state).randint(0, 2**31 - 1))

    def _c_for(self, n_samples: int) -> float:
        """C of the objective on n_samples rows (from ``lam`` when given)."""
        return float(self.C) if self.lam is None else 1.0 / (n_samples * float(self.lam))

    def _lambda_for(self, n_samples: int) -> float:
        """lambda of the objective on n_samples rows (from C unless ``lam`` is given)."""
        return float(self.lam) if self.lam is not None else 1.0 / (n_samples * float(self.C))

    def _native_fit(
        self,
        X_native: Any,
        targets: np.ndarray,
        n_classes: int,
        weights: Optional[np.ndarray],
        seed: int,
        *,
        compare_with: Optional[str] = None,
        callback: Callback = None,
        observer: Any = None,
    ) -> Dict[str, Any]:
        """The budgeted pass (BSGD or BSCA) on validated rows; sets ``lambda_`` and returns the
        engine's result (its BSGD run under "state")."""
        n_samples = X_native.shape[0] if hasattr(X_native, "shape") else X_native[2].shape[0] - 1
        C = self._c_for(n_samples)
        self.lambda_ = self._lambda_for(n_samples)
        common = self._run_settings(C, seed, weights, compare_with)
        common.update(callback=callback, observer=observer)
        if self.solver == "bsca":
            return _budgetsvm.fit_bsca(
                X_native,
                targets,
                n_classes,
                dual_step=self.dual_step,
                average=bool(self.average),
                **common,
            )
        return _budgetsvm.fit_bsgd(
            X_native,
            targets,
            n_classes,
            average=bool(self.average),
            lambda_=None if self.lam is None else float(self.lam),
            **common,
        )

    def _run_settings(
        self, C: float, seed: int, weights: Optional[np.ndarray], compare_with: Optional[str]
    ) -> Dict[str, Any]:
        """The settings of a budgeted run on rows in memory (``fit_bsgd``, ``fit_bsca``,
        ``fit_pairs``)."""
        return dict(
            c=C,
            gamma=self.gamma_,
            budget=int(self.budget),
            epochs=int(self.epochs),
            maintenance=self.maintenance,
            merge=self.merge,
            seed=seed,
            compare_with=compare_with,
            shuffle=bool(self.shuffle),
            sv_storage=self.sv_storage,
            sample_weight=weights,
            epsilon=self._epsilon(),
            # Merges serve the model returned: the average's placement only when no polish
            # re-solves the coefficients over the basis (docs/architecture.md).
            average_placement=not self.polish,
        )

    def _new_stream(
        self,
        width: int,
        n_classes: int,
        n_samples: int,
        sparse_input: bool,
        epochs: int = 1,
        *,
        budget: Optional[int] = None,
        seed: Optional[int] = None,
    ) -> Any:
        """A fresh BSGD run that batches continue (``partial_fit``, ``fit_file``); ``budget``
        and ``seed`` replace the estimator's (one-vs-one's pairs)."""
        return _budgetsvm.BsgdStream(
            width,
            n_classes,
            c=float(self.C),
            lambda_=None if self.lam is None else float(self.lam),
            gamma=self.gamma_,
            budget=int(self.budget) if budget is None else int(budget),
            maintenance=self.maintenance,
            merge=self.merge,
            seed=self._seed() if seed is None else int(seed),
            n_samples=int(n_samples),
            epochs=int(epochs),
            average=bool(self.average),
            shuffle=bool(self.shuffle),
            sv_storage=self.sv_storage,
            sparse_input=sparse_input,
            epsilon=self._epsilon(),
        )

    def _fit_file_start(self, file: LibsvmFile) -> None:
        """Sets the width, the kernel width and lambda of a fit on ``file``."""
        self.n_features_in_ = file.width
        self.gamma_ = file_gamma(self.gamma, file)
        self.lambda_ = self._lambda_for(file.n_rows)

    def _stream_file(
        self,
        file: LibsvmFile,
        n_classes: int,
        chunk_targets: Callable[[np.ndarray], Tuple[np.ndarray, Optional[np.ndarray]]],
        progress: Optional[Callable[[int, int], Any]],
    ) -> Any:
        """``fit_file``'s budgeted pass over ``file``: ``epochs`` passes of its chunks through
        one fresh BSGD run, a chunk's labels turned into the engine's targets and row weights
        by ``chunk_targets``. Sets the kernel width, lambda and the run; returns the run."""
        self._fit_file_start(file)
        epochs = int(self.epochs)
        stream = self._new_stream(file.width, n_classes, file.n_rows, True, epochs)
        done = 0
        for epoch in range(1, epochs + 1):
            for X_chunk, labels in file.chunks():
                targets, weights = chunk_targets(labels)
                stream.partial_fit(
                    X_chunk, targets, sample_weight=weights, average_placement=not self.polish
                )
                done += len(labels)
                if progress is not None:
                    progress(done, epochs * file.n_rows)
            self._file_epoch_done(stream, epoch, epochs)
        self._stream = stream
        return stream

    def _file_epoch_done(self, stream: Any, epoch: int, epochs: int) -> None:
        """Called after each of ``fit_file``'s epochs (``BudgetSVC`` prints its verbose line)."""

    def _polish_file(
        self,
        file: LibsvmFile,
        n_rows: int,
        classes: np.ndarray,
        class_weights: Optional[np.ndarray] = None,
        pair: Optional[Tuple[int, int]] = None,
        hessian_free_from: Optional[int] = None,
    ) -> Dict[str, Any]:
        """The polish of the current model on the ``n_rows`` rows of ``file``, read a chunk
        at a time (``classes``: the file's labels, empty for regression; ``pair`` = (a, b): a
        binary model polished on the rows of classes a and b only, b positive, as one-vs-one's
        pairs; ``hessian_free_from`` as ``_polish_native``'s).
        Returns the engine's result: ``fit_file`` passes it to ``_apply_polish`` itself, so
        that the warning of an unconverged polish points at fit_file's caller."""
        return _budgetsvm.polish_file(
            file.path,
            file.chunk_rows,
            file.width,
            classes,
            pair=None if pair is None else (int(pair[0]), int(pair[1])),
            hessian_free_from=hessian_free_from,
            support_vectors=to_native(self.support_vectors_),
            coef=np.ascontiguousarray(self.dual_coef_.T),
            gamma=self.gamma_,
            c=self._c_for(n_rows),
            tol=float(self.polish_tol),
            max_iter=int(self.polish_max_iter),
            cache_size=float(self.polish_cache_size),
            intercept=np.ascontiguousarray(self.intercept_),
            class_weights=class_weights,
            callback=polish_callback(self.verbose, None),
            epsilon=self._epsilon(),
            n_threads=check_n_jobs(self.n_jobs),
        )

    def _set_model(self, result: Dict[str, Any], intercept: Any = 0.0) -> None:
        """Fitted attributes from a native result dict (fit, partial_fit); the budgeted pass's
        model has no intercept of its own: ``intercept`` (the targets' offset, or 0)."""
        self.support_vectors_ = sv_from_native(result.pop("support_vectors"))
        sv = self.support_vectors_
        n_sv = sv.shape[0]
        stored = sv.nnz if sp.issparse(sv) else np.count_nonzero(sv)
        result["mean_sv_nnz"] = stored / n_sv if n_sv else 0.0
        self.dual_coef_ = np.ascontiguousarray(result.pop("coef").T)
        self.intercept_ = np.full(self.dual_coef_.shape[0], float(intercept))
        self.n_iter_ = result["epochs"]
        self.budget_ = int(self.budget)
        events = result["maintenance_events"]
        result["mean_weight_degradation"] = (
            result["total_weight_degradation"] / events if events else 0.0
        )
        self.fit_stats_ = result

    def _polish_native(
        self,
        X_native: Any,
        targets: np.ndarray,
        n_classes: int,
        weights: Optional[np.ndarray],
        C: float,
        callback: Callback = None,
        hessian_free_from: Optional[int] = None,
    ) -> None:
        """The polish of the current model on validated rows (warm start: its coefficients
        and intercept); ``hessian_free_from`` overrides the support vectors from which the
        solve is Hessian-free (one-vs-one's ``PolishMethodProbe``)."""
        result = _budgetsvm.polish(
            X_native,
            targets,
            n_classes,
            support_vectors=to_native(self.support_vectors_),
            coef=np.ascontiguousarray(self.dual_coef_.T),
            gamma=self.gamma_,
            c=float(C),
            tol=float(self.polish_tol),
            max_iter=int(self.polish_max_iter),
            cache_size=float(self.polish_cache_size),
            intercept=np.ascontiguousarray(self.intercept_, dtype=np.float64),
            sample_weight=weights,
            callback=callback,
            epsilon=self._epsilon(),
            n_threads=check_n_jobs(self.n_jobs),
            hessian_free_from=hessian_free_from,
        )
        self._apply_polish(result)

    def _apply_polish(self, result: Dict[str, Any]) -> None:
        self.dual_coef_ = np.ascontiguousarray(result.pop("coef").T)
        self.intercept_ = np.asarray(result.pop("intercept"), dtype=np.float64)
        stats = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in result.items()}
        self.fit_stats_ = {**self.fit_stats_, "polish": stats}
        if not stats["converged"]:
            warnings.warn(
                f"the polish stopped after polish_max_iter={self.polish_max_iter} Newton "
                "iterations before converging; the model is kept (raise polish_max_iter)",
                ConvergenceWarning,
                stacklevel=4,
            )

    def _expansion_values(self, X: Any) -> np.ndarray:
        """sum_j dual_coef_[:, j] k(x, s_j) + intercept_ for every row: (n_samples, n_out)."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, order="C", reset=False)
        intercept = getattr(self, "intercept_", None)
        # A one-vs-one model (BudgetSVC) holds its vectors grouped by class pair.
        groups = getattr(self, "n_support_per_pair_", None)
        return _budgetsvm.decision_function(
            to_native(self.support_vectors_),
            np.ascontiguousarray(self.dual_coef_ if groups is not None else self.dual_coef_.T),
            self.gamma_,
            to_native(X),
            n_threads=check_n_jobs(self.n_jobs),
            group_counts=None if groups is None else np.asarray(groups, dtype=np.int64),
            intercept=None if intercept is None else np.ascontiguousarray(intercept, np.float64),
        )


class LibsvmFile(NamedTuple):
    """A LIBSVM file as ``file_summary`` checked it: its path, the lines read at a time, the
    first pass's summary, its rows and its width (``n_features`` where given)."""

    path: str
    chunk_rows: int
    summary: Dict[str, Any]
    n_rows: int
    width: int

    def chunks(self) -> Iterator[Tuple[Tuple[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]]:
        """One pass over the rows, ``chunk_rows`` lines at a time: each chunk's rows (the
        engine's CSR tuple, at the file's width) and labels."""
        for data, indices, indptr, labels, chunk_width in _budgetsvm.LibsvmChunkReader(
            self.path, self.chunk_rows
        ):
            if chunk_width > self.width:  # the file changed since the first pass
                raise ValueError(f"{self.path} has features beyond index {self.width}")
            yield (data, indices.astype(np.int64), indptr, self.width), labels


def file_summary(path: Any, chunk_rows: Any, n_features: Any) -> LibsvmFile:
    """The first pass of ``fit_file``: a LIBSVM file, checked (a regular file with rows and
    features; ``n_features`` widens it)."""
    import errno
    import os
    import stat

    path = os.fspath(path)
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(
            errno.EISDIR, "Is a directory; fit_file needs a LIBSVM-format file", path
        )
    if not stat.S_ISREG(mode):
        # A pipe or device would give its rows to the first pass only (and a FIFO would block
        # the second open forever).
        raise ValueError(
            f"fit_file reads its file once per epoch after a first pass for the targets and "
            f"the size, so it needs a regular file; {path} is a pipe or device: write it to "
            "a file first, or load it and call fit"
        )
    check_positive("chunk_rows", chunk_rows, integer=True, minimum=1)
    summary = _budgetsvm.summarize_libsvm(path, int(chunk_rows))
    n_rows, width = summary["n_rows"], summary["n_features"]
    if n_rows == 0:
        raise ValueError(f"{path} holds no data rows")
    if n_features is not None:
        check_positive("n_features", n_features, integer=True, minimum=1)
        if width > n_features:
            raise ValueError(
                f"{path} has features up to index {width}, more than n_features={n_features}"
            )
        width = int(n_features)
    if width == 0:
        raise ValueError(f"{path} has no features (0 columns)")
    return LibsvmFile(path, int(chunk_rows), summary, n_rows, width)


def file_gamma(gamma: Any, file: LibsvmFile) -> float:
    """``resolve_gamma`` for a file known only by its running sums."""
    width = file.width
    if isinstance(gamma, str) and gamma == "scale":
        count = float(file.n_rows) * width
        mean = file.summary["value_sum"] / count
        var = max(file.summary["value_sq_sum"] / count - mean * mean, 0.0)
        return scale_gamma(width, var, "for this file; pass a numeric gamma")
    if isinstance(gamma, str) and gamma == "auto":
        return 1.0 / width
    return resolve_gamma(gamma, sp.csr_matrix((1, width)))


def epoch_callback(verbose: bool, extra: Callback) -> Callback:
    """The native per-epoch callback: the verbose line and/or a caller's hook (the CLI's
    progress bar)."""
    if extra is None:
        return print_epoch if verbose else None
    if not verbose:
        return extra

    def both(info: Dict[str, Any]) -> None:
        print_epoch(info)
        extra(info)

    return both


def polish_callback(verbose: bool, extra: Callback) -> Callback:
    """The polish's per-iteration callback: the verbose line; a caller's hook (the CLI's) only
    if it asks for polish lines."""
    if verbose:
        return print_epoch
    return extra if getattr(extra, "wants_polish", False) else None


def print_epoch(info: Dict[str, Any]) -> None:
    if info.get("polish"):
        print(
            f"[budgetsvm] polish iteration {info['epoch']} on {info.get('rows', 0):,} rows: "
            f"objective {info['objective']:.6g}, {info['iteration']} active-set changes so far, "
            f"{info['seconds']:.2f} s",
            file=sys.stdout,
            flush=True,
        )
        return
    # Runs of several class pairs at once (one-vs-one) say whose epoch it is.
    pair = f"pair {info['pair'] + 1}, " if "pair" in info else ""
    print(
        f"[budgetsvm] {pair}epoch {info['epoch']}/{info['epochs']}: {info['iteration']} steps, "
        f"{info['n_sv']} SVs, {info['maintenance_events']} budget maintenance events, "
        f"{info['seconds']:.2f} s",
        file=sys.stdout,
        flush=True,
    )
