"""Command line: ``budgetsvm train | predict | evaluate | demo``.

LIBSVM-style: ``train`` reads a LIBSVM-format file (plain, .gz, .bz2 or .xz) and writes a model
file (``docs/model_format.md``): a classifier, a regression or a novelty detector, budgeted
(BSGD, BSCA) or exact (ALFPGM, SMO, any kernel). ``predict`` writes one label, value or
decision value per line, ``evaluate`` prints accuracy and the confusion matrix (R^2 and errors
for regression). Prediction and evaluation read the data
in chunks, so files larger than memory work; so does training with ``--stream`` (BSGD).
Errors are one line on stderr, never a traceback; exit codes are listed in ``budgetsvm --help``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import IO, Any, Callable, List, NoReturn, Optional

EXIT_OK = 0
EXIT_DATA = 1  # a data or model file is malformed, or training/prediction failed on it
EXIT_USAGE = 2  # bad command line (unknown option, bad value)
EXIT_IO = 3  # a file cannot be read or written
EXIT_INTERRUPTED = 130

EXIT_CODES = """\
exit status:
  0    success
  1    bad data: a malformed LIBSVM line, a corrupted or foreign model file, data that
       do not fit the model (more features, one class only)
  2    bad command line: unknown option, invalid value (e.g. -c -1)
  3    a file cannot be read or written (missing, permission, broken compression)
  130  interrupted (Ctrl-C)
"""

DEMO_HELP = """\
Train BSGD on the embedded a9a data (UCI Adult; 32,561 training and 16,281 test rows) with the
hyper-parameters of Glasmachers & Qaadan (2018), C = 2^5 and gamma = 2^-7, merging the budget
with golden section search (gss) and with the precomputed lookup of the weight degradation
(lookup-wd), then lookup-wd with the polish (the exact solve of the coefficients over the
budgeted support vectors), and print the three side by side.
"""

TRAIN_HELP = """\
Train an SVM on a LIBSVM-format file (plain, .gz, .bz2 or .xz) and write the model file
(default: TRAIN_FILE.model, as svm-train does).

The task (-T) is classification (labels), regression (real targets: epsilon-SVR) or novelty
detection (labels ignored: a one-class SVM, +1 inside). The solver (-A) picks the model: bsgd
and bsca train a budgeted Gaussian-kernel SVM (BudgetSVC, BudgetSVR) of at most --budget
support vectors; alfpgm and smo solve the exact SVM (KernelSVC, KernelSVR, KernelOneClassSVM)
with any kernel (-k), or with --nu-svm LIBSVM's nu formulation (KernelNuSVC, KernelNuSVR:
svm-train's -s 1 and -s 4) with -n as its nu. Defaults: bsgd for classification, bsca for
regression, alfpgm for novelty detection (exact only).

By default the file is loaded into memory and trained for --epochs epochs. With --stream (BSGD
only) it is read --chunk-rows lines at a time and never held whole: memory is one chunk plus
the budget, so files larger than memory train too. A precomputed kernel (-k precomputed)
reads each row's kernel values K(x_i, x_1..x_n) as its features 1..n.
"""

TRAIN_EXAMPLES = """\
examples:
  budgetsvm train -c 32 -g 0.0078125 -B 100 -e 20 a9a a9a.model
  budgetsvm train --solver bsca -c 32 -g 2 -B 500 ijcnn1.bz2
  budgetsvm train --stream --chunk-rows 200000 -L 1e-4 -g 8 -B 500 -e 1 huge.svm.xz huge.model
  budgetsvm train -m project -B 50 -s 7 -j 2 train.svm
  budgetsvm train -B auto -c 32 -g 2 -e 1 ijcnn1.bz2
  budgetsvm train --search --Cs 1,4,16,64 --gammas 0.5,2,8 -e 1 ijcnn1.bz2 ijcnn1.model
  budgetsvm train -T regression -c 10 -g 0.1 -p 0.1 -B 500 fried.train fried.model
  budgetsvm train -T regression -A alfpgm -c 10 -g 0.1 fried.train fried-exact.model
  budgetsvm train -T novelty -n 0.1 -g 0.5 ijcnn1.bz2 ijcnn1-novelty.model
  budgetsvm train -A smo --nu-svm -n 0.2 -g 2 ijcnn1.bz2 ijcnn1-nu.model
  budgetsvm train -A smo -k poly -d 3 -g 0.0078125 -r 1 a9a a9a-poly.model
"""

PREDICT_HELP = """\
Predict the rows of a LIBSVM-format file (labels in the file are ignored) with a model file
written by `budgetsvm train` (or save_model): one predicted label per line (+1 / -1 for
novelty detection, the predicted value for regression), or with --values the decision values
(one per class, space-separated, for more than two classes). The file is read in chunks.
OUTPUT defaults to stdout ('-').
"""

PREDICT_EXAMPLES = """\
examples:
  budgetsvm predict a9a.t a9a.model a9a.predictions
  budgetsvm predict --values a9a.t.xz a9a.model - | head
"""

EVALUATE_HELP = """\
Evaluate a model file on a labelled LIBSVM-format file: accuracy and the confusion matrix
(rows: true label, columns: predicted label; for novelty detection the labels are +1 / -1),
or for a regression model R^2, mean squared and mean absolute error. The file is read in
chunks.
"""

EVALUATE_EXAMPLES = """\
examples:
  budgetsvm evaluate a9a.t.xz a9a.model
  budgetsvm evaluate --chunk-rows 50000 test.svm model
"""


class CliError(Exception):
    """An error to report as one line with the given exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `budgetsvm train: error: ... (see --help)`."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


class Progress:
    """A progress bar on stderr, redrawn at most 10 times a second; off when disabled."""

    def __init__(self, what: str, enabled: bool) -> None:
        self.what = what
        self.enabled = enabled
        self.unit = "rows"
        self.start = time.perf_counter()
        self.last = 0.0
        self.shown = False

    def update(self, done: int, total: Optional[int]) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < 0.1 and (total is None or done < total):
            return
        self.last = now
        elapsed = now - self.start
        if total:
            frac = min(done / total, 1.0)
            bar = "#" * int(30 * frac) + "." * (30 - int(30 * frac))
            text = f"{self.what} [{bar}] {100 * frac:5.1f}% {done:,}/{total:,} {self.unit} {elapsed:.1f} s"
        else:
            text = f"{self.what}: {done:,} {self.unit} {elapsed:.1f} s"
        sys.stderr.write("\r" + text)
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.shown = False


def _progress_enabled(args: argparse.Namespace) -> bool:
    if getattr(args, "quiet", False):
        return False
    if getattr(args, "progress", False):
        return True
    return sys.stderr.isatty()


BUDGETED_SOLVERS = ("bsgd", "bsca")
EXACT_SOLVERS = ("alfpgm", "smo")
DEFAULT_SOLVER = {"classification": "bsgd", "regression": "bsca", "novelty": "alfpgm"}


def _gamma(args: argparse.Namespace) -> Any:
    if args.gamma in ("scale", "auto"):
        return args.gamma
    try:
        return float(args.gamma)
    except ValueError:
        raise CliError(
            f"-g/--gamma must be a positive number, 'scale' or 'auto'; got {args.gamma!r}",
            EXIT_USAGE,
        ) from None


def _budget_arg(text: str) -> Any:
    """-B/--budget: an integer, or 'auto'."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or 'auto', got {text!r}") from None


def _number_list(text: str) -> List[float]:
    """--Cs: comma-separated numbers."""
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None


def _gamma_list(text: str) -> List[Any]:
    """--gammas: comma-separated numbers, 'scale' or 'auto'."""
    values: List[Any] = []
    for v in text.split(","):
        try:
            values.append(v if v in ("scale", "auto") else float(v))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be comma-separated numbers, 'scale' or 'auto', got {text!r}"
            ) from None
    return values


def _search_estimator(args: argparse.Namespace, base: Any) -> Any:
    """--search: the cross-validated estimator of ``base``'s kind with ``base``'s settings
    (those not at their defaults), searching --Cs x --gammas (and the budget) over --folds."""
    from budgetsvm import BudgetSVCCV, BudgetSVRCV, KernelSVCCV, KernelSVRCV

    if args.stream or args.task == "novelty" or args.nu_svm or args.kernel == "precomputed":
        raise ValueError(
            "--search cross-validates C-SVC or epsilon-SVR on rows in memory; it takes no "
            "--stream, -T novelty, --nu-svm or -k precomputed"
        )
    if args.folds < 2:
        raise ValueError(f"--folds must be at least 2, got {args.folds}")
    cls = {
        "BudgetSVC": BudgetSVCCV,
        "BudgetSVR": BudgetSVRCV,
        "KernelSVC": KernelSVCCV,
        "KernelSVR": KernelSVRCV,
    }[type(base).__name__]
    defaults = type(base)().get_params()
    accepted = cls().get_params()
    params = {
        k: v
        for k, v in base.get_params().items()
        if k in accepted and k not in ("C", "gamma") and v != defaults[k]
    }
    if "budgets" in accepted:
        params["budgets"] = "auto" if args.budget is None else args.budget
    from sklearn.model_selection import KFold, StratifiedKFold

    # Shuffled folds, as LIBSVM's grid.py (svm-train -v): a file's rows are often in order.
    splitter = StratifiedKFold if args.task == "classification" else KFold
    folds = splitter(args.folds, shuffle=True, random_state=args.seed or 0)
    return cls(Cs=args.Cs, gammas=args.gammas, cv=folds, **params)


def _budgeted_only(args: argparse.Namespace) -> List[str]:
    """The budgeted options given on the command line (an exact solver takes none)."""
    given = []
    for option, value in (
        ("-B/--budget", args.budget),
        ("-e/--epochs", args.epochs),
        ("-m/--maintenance", args.maintenance),
        ("-M/--merge", args.merge),
        ("-L/--lambda", args.lam),
        ("--dual-step", args.dual_step),
        ("--multiclass", args.multiclass),
    ):
        if value is not None:
            given.append(option)
    for option, flag in (
        ("--no-average", args.no_average),
        ("--no-polish", args.no_polish),
        ("--no-shuffle", args.no_shuffle),
        ("--stream", args.stream),
    ):
        if flag:
            given.append(option)
    return given


def _estimator(args: argparse.Namespace) -> Any:
    """The estimator the options ask for, every parameter checked before any data is read."""
    task = args.task
    solver = args.solver or DEFAULT_SOLVER[task]
    args.solver = solver
    gamma = _gamma(args)
    try:
        if args.seed is not None and args.seed < 0:
            raise ValueError(f"-s/--seed must be non-negative, got {args.seed}")
        if args.chunk_rows < 1:
            raise ValueError(f"--chunk-rows must be at least 1, got {args.chunk_rows}")
        if solver in EXACT_SOLVERS:
            given = _budgeted_only(args)
            if given:
                raise ValueError(
                    f"{', '.join(given)}: only the budgeted solvers (bsgd, bsca) take this; "
                    f"-A {solver} solves the exact SVM"
                )
            clf = _exact_estimator(args, task, solver, gamma)
            # Parameters are checked by fit; checking them now spares reading the file.
            clf._check_params()
        else:
            if task == "novelty":
                raise ValueError(
                    "novelty detection is exact only: -A alfpgm or -A smo (the one-class SVM)"
                )
            if args.nu_svm:
                raise ValueError("--nu-svm is exact only: -A alfpgm or -A smo")
            if args.kernel != "rbf":
                raise ValueError(
                    f"the budgeted solvers (bsgd, bsca) train Gaussian (rbf) kernels only, the "
                    f"kernel their merges are derived for; -k {args.kernel} needs -A alfpgm "
                    "or -A smo"
                )
            if args.stream and solver != "bsgd":
                raise ValueError("--stream trains BSGD only (BSCA keeps one variable per row)")
            if args.stream and args.budget == "auto":
                raise ValueError(
                    "-B auto chooses the budget by fitting on rows in memory; --stream needs "
                    "a number for -B/--budget"
                )
            clf = _budgeted_estimator(args, task, solver, gamma)
            clf._check_params()
        if args.search:
            clf = _search_estimator(args, clf)
        elif args.Cs is not None or args.gammas is not None:
            raise ValueError("--Cs and --gammas are the grid of --search")
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    return clf


def _budgeted_estimator(args: argparse.Namespace, task: str, solver: str, gamma: Any) -> Any:
    from budgetsvm import BudgetSVC, BudgetSVR

    params = dict(
        C=args.cost,
        lam=args.lam,
        gamma=gamma,
        budget=100 if args.budget is None else args.budget,
        solver=solver,
        maintenance=args.maintenance or "merge",
        merge=args.merge or "lookup-wd",
        epochs=5 if args.epochs is None else args.epochs,
        polish=not args.no_polish,
        shuffle=not args.no_shuffle,
        dual_step=args.dual_step or "decaying",
        random_state=args.seed,
        verbose=args.verbose,
    )
    if task == "regression":
        if args.multiclass is not None:
            raise ValueError("--multiclass is for classification")
        return BudgetSVR(epsilon=args.epsilon, **params)
    return BudgetSVC(average=not args.no_average, multiclass=args.multiclass or "auto", **params)


def _exact_estimator(args: argparse.Namespace, task: str, solver: str, gamma: Any) -> Any:
    from budgetsvm import KernelNuSVC, KernelNuSVR, KernelOneClassSVM, KernelSVC, KernelSVR

    params: dict = dict(
        kernel=args.kernel,
        degree=args.degree,
        gamma=gamma,
        coef0=args.coef0,
        tol=args.tol,
        solver=solver,
        shrinking=not args.no_shrinking,
        verbose=args.verbose,
    )
    if args.cache_size is not None:
        params["cache_size"] = args.cache_size
    if task == "novelty":
        return KernelOneClassSVM(nu=args.nu, **params)
    if task == "regression":
        if args.nu_svm:
            return KernelNuSVR(C=args.cost, nu=args.nu, **params)
        return KernelSVR(C=args.cost, epsilon=args.epsilon, **params)
    if args.nu_svm:
        return KernelNuSVC(nu=args.nu, random_state=args.seed, **params)
    return KernelSVC(C=args.cost, random_state=args.seed, **params)


def _set_threads(args: argparse.Namespace) -> None:
    if args.threads is not None:
        from budgetsvm import set_num_threads

        if args.threads < 0:
            raise CliError(f"-j/--threads must be >= 0, got {args.threads}", EXIT_USAGE)
        set_num_threads(args.threads)


def _refuse_overwriting_inputs(output: str, *inputs: str) -> None:
    """An output path naming an input file would destroy it (opened for writing first)."""
    if output in (None, "-"):
        return
    for path in inputs:
        same = os.path.abspath(output) == os.path.abspath(path)
        try:
            same = same or os.path.samefile(output, path)
        except OSError:
            pass
        if same:
            raise CliError(
                f"output {output} is the input file {path}; refusing to overwrite it", EXIT_USAGE
            )


def _train(args: argparse.Namespace) -> int:
    clf = _estimator(args)
    _set_threads(args)
    model_path = args.model or os.path.basename(args.train_file) + ".model"
    _refuse_overwriting_inputs(model_path, args.train_file)
    bar = Progress("training", _progress_enabled(args))
    start = time.perf_counter()
    try:
        if args.stream:
            seen = [0]

            def on_chunk(done: int, total: int) -> None:
                seen[0] = total
                bar.update(done, total)

            clf.fit_file(args.train_file, chunk_rows=args.chunk_rows, progress=on_chunk)
            # The file's rows: the progress total is epochs of them.
            n_rows = seen[0] // max(clf.n_iter_, 1)
        else:
            from budgetsvm.datasets import load_svmlight_file

            X, y = load_svmlight_file(args.train_file)
            n_rows = X.shape[0]
            if n_rows == 0:
                raise ValueError(f"{args.train_file} holds no data rows")
            if args.kernel == "precomputed":
                X = _precomputed_rows(X, n_rows, args.train_file)
            if args.task == "novelty":
                clf.fit(X)
            elif args.search:
                bar.what, bar.unit = "searching", "fits"
                clf.fit(X, y, _callback=bar.update)
            elif args.task == "classification" and args.solver in BUDGETED_SOLVERS:

                def on_epoch(info: Any) -> None:
                    bar.update(info["epoch"] * n_rows, info["epochs"] * n_rows)

                clf.fit(X, y, _callback=on_epoch)
            else:
                clf.fit(X, y)
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    clf.save(model_path)
    if not args.quiet:
        if args.search:
            print(_search_summary(clf))
            clf = clf.best_estimator_
        print(f"{_summary(args, clf, n_rows)}, {seconds:.2f} s; model written to {model_path}")
    return EXIT_OK


def _search_summary(cv: Any) -> str:
    """--search: what it chose, and its cross-validated score."""
    best = ", ".join(
        f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}" for k, v in cv.best_params_.items()
    )
    budget = f", budget {cv.best_budget_}" if hasattr(cv, "best_budget_") else ""
    return (
        f"search: {len({str(p) for p in cv.cv_results_['params']})} points, "
        f"{cv.n_splits_} folds; best "
        f"{best}{budget}; cross-validated score {cv.best_score_:.6g}"
    )


def _precomputed_rows(X: Any, n_rows: int, path: str) -> Any:
    """A precomputed kernel's rows, dense: row i holds K(x_i, x_j) as feature j + 1."""
    if X.shape[1] > n_rows:
        raise ValueError(
            f"{path}: a precomputed kernel has one column per training row ({n_rows}), but "
            f"the file has features up to {X.shape[1]}"
        )
    import numpy as np

    dense = np.zeros((n_rows, n_rows))
    dense[:, : X.shape[1]] = X.toarray()
    return dense


def _summary(args: argparse.Namespace, clf: Any, n_rows: int) -> str:
    import numpy as np

    n_sv = clf.dual_coef_.shape[1]
    what = {
        "classification": f"{len(getattr(clf, 'classes_', []))} classes",
        "regression": "regression",
        "novelty": "novelty detection",
    }[args.task]
    text = (
        f"{args.solver.upper()}: {n_rows:,} rows, {clf.n_features_in_} features, {what}, "
        f"{n_sv} support vectors"
    )
    if args.solver in BUDGETED_SOLVERS:
        text += f" (budget {clf.budget_}), {clf.n_iter_} epochs, gamma {clf.gamma_:.6g}"
    else:
        text += f", kernel {clf.kernel}"
        if clf.kernel not in ("linear", "precomputed"):
            text += f" (gamma {clf.gamma_:.6g})"
        text += f", {int(sum(np.atleast_1d(clf.n_iter_))):,} iterations"
    return text


def _format_label(v: Any) -> str:
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return str(int(v))
    return str(v)


def _chunks(path: str, chunk_rows: int, n_features: int):
    from budgetsvm.datasets import iter_svmlight_chunks

    return iter_svmlight_chunks(path, chunk_rows=chunk_rows, n_features=n_features)


def _load_model(path: str) -> Any:
    # The model file's arrays predict through the engine directly: no estimator, so no
    # scikit-learn import (a prediction starts at once, like LIBSVM's svm-predict).
    from budgetsvm.modelfile import read_model

    return read_model(path)


def _check_chunk_rows(args: argparse.Namespace) -> None:
    if args.chunk_rows < 1:
        raise CliError(f"--chunk-rows must be at least 1, got {args.chunk_rows}", EXIT_USAGE)


def _predict(args: argparse.Namespace) -> int:
    import numpy as np

    _check_chunk_rows(args)
    _set_threads(args)
    _refuse_overwriting_inputs(args.output, args.test_file, args.model)
    clf = _load_model(args.model)
    out: IO[str]
    close = False
    if args.output in (None, "-"):
        out = sys.stdout
    else:
        try:
            out = open(args.output, "w")
        except OSError as e:
            raise CliError(f"cannot write {args.output}: {e.strerror or e}", EXIT_IO) from None
        close = True
    bar = Progress("predicting", _progress_enabled(args))
    done = 0
    try:
        for X, _ in _chunks(args.test_file, args.chunk_rows, clf.n_features):
            if args.values or clf.regression:
                values = clf.decision_function(X)
                values = values[:, None] if values.ndim == 1 else values
                lines = [" ".join(f"{v:.17g}" for v in row) for row in values]
            else:
                lines = [_format_label(v) for v in np.asarray(clf.predict(X)).tolist()]
            out.write("\n".join(lines) + "\n")
            done += X.shape[0]
            bar.update(done, None)
    finally:
        bar.close()
        if close:
            out.close()
    return EXIT_OK


def _evaluate_regression(args: argparse.Namespace, model: Any) -> int:
    """R^2, mean squared and mean absolute error of a regression model, in one pass (sums of
    the targets and of the errors)."""
    import numpy as np

    n, sum_y, sum_y2, sse, sae = 0, 0.0, 0.0, 0.0, 0.0
    bar = Progress("evaluating", _progress_enabled(args))
    try:
        for X, y in _chunks(args.test_file, args.chunk_rows, model.n_features):
            err = model.predict(X) - y
            n += len(y)
            sum_y += float(np.sum(y))
            sum_y2 += float(np.sum(y * y))
            sse += float(np.sum(err * err))
            sae += float(np.sum(np.abs(err)))
            bar.update(n, None)
    finally:
        bar.close()
    if n == 0:
        raise CliError(f"{args.test_file} holds no data rows", EXIT_DATA)
    total = sum_y2 - sum_y * sum_y / n
    r2 = 1.0 - sse / total if total > 0 else float("nan")
    print(f"R^2: {r2:.6f}")
    print(f"mean squared error: {sse / n:.6g}")
    print(f"mean absolute error: {sae / n:.6g}")
    print(f"rows: {n:,}")
    return EXIT_OK


def _evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    _check_chunk_rows(args)
    _set_threads(args)
    clf = _load_model(args.model)
    if clf.regression:
        return _evaluate_regression(args, clf)
    classes = list(clf.classes.tolist())
    index = {c: k for k, c in enumerate(classes)}
    extra: List[Any] = []  # true labels the model does not know
    counts: dict = {}
    bar = Progress("evaluating", _progress_enabled(args))
    n = 0
    try:
        for X, y in _chunks(args.test_file, args.chunk_rows, clf.n_features):
            if clf.classes.dtype.kind in "iu":
                y = y.astype(clf.classes.dtype) if np.all(y == np.round(y)) else y
            pred = clf.predict(X)
            for t, p in zip(y.tolist(), pred.tolist()):
                counts[(t, p)] = counts.get((t, p), 0) + 1
                if t not in index and t not in extra:
                    extra.append(t)
            n += X.shape[0]
            bar.update(n, None)
    finally:
        bar.close()
    if n == 0:
        raise CliError(f"{args.test_file} holds no data rows", EXIT_DATA)
    correct = sum(c for (t, p), c in counts.items() if t == p)
    rows = classes + sorted(extra, key=str)
    names = [_format_label(c) for c in rows]
    width = max(8, *(len(s) for s in names))
    print(f"accuracy: {100.0 * correct / n:.4f}% ({correct:,}/{n:,})")
    print("confusion matrix (rows: true label, columns: predicted label):")
    print(" " * width + " " + " ".join(f"{s:>{width}}" for s in names[: len(classes)]))
    for t, name in zip(rows, names):
        cells = [counts.get((t, p), 0) for p in classes]
        print(f"{name:>{width}} " + " ".join(f"{c:>{width},}" for c in cells))
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from budgetsvm import BudgetSVC, simd_level
    from budgetsvm.datasets import load_default

    t0 = time.perf_counter()
    X_train, y_train, X_test, y_test = load_default()
    load_s = time.perf_counter() - t0
    print(
        f"a9a: {X_train.shape[0]} training rows, {X_test.shape[0]} test rows, "
        f"{X_train.shape[1]} features (loaded in {load_s:.2f} s; kernel loops: {simd_level()})"
    )
    print(
        f"BSGD, C = 2^5, gamma = 2^-7, budget = {args.budget}, {args.epochs} epochs, "
        f"seed {args.seed}\n"
    )
    header = f"{'merge search':<12} {'polish':<6} {'test acc':>9} {'train s':>8} {'merge s':>8} "
    header += f"{'SVs':>5} {'merges':>8} {'merge freq':>10} {'mean WD':>9}"
    print(header)
    print("-" * len(header))
    for merge, polish in (("gss", False), ("lookup-wd", False), ("lookup-wd", True)):
        clf = BudgetSVC(
            C=2.0**5,
            gamma=2.0**-7,
            budget=args.budget,
            epochs=args.epochs,
            merge=merge,
            random_state=args.seed,
            polish=polish,
        )
        start = time.perf_counter()
        clf.fit(X_train, y_train)
        seconds = time.perf_counter() - start
        acc = clf.score(X_test, y_test)
        s = clf.fit_stats_
        print(
            f"{merge:<12} {'yes' if polish else 'no':<6} {100 * acc:>8.2f}% {seconds:>8.2f} "
            f"{s['maintenance_seconds']:>8.2f} "
            f"{clf.support_vectors_.shape[0]:>5} {s['maintenance_events']:>8} "
            f"{100 * s['maintenance_frequency']:>9.1f}% {s['mean_weight_degradation']:>9.3g}"
        )
    print(
        "\nLIBSVM (exact SVM, same C and gamma) reaches 84.82% on this split. The polish solves "
        "the\ncoefficients and an intercept exactly over the budgeted support vectors."
    )
    return EXIT_OK


def _common_io(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--chunk-rows",
        type=int,
        default=100_000,
        metavar="N",
        help="lines of the data file read at a time (default 100000)",
    )
    p.add_argument("-j", "--threads", type=int, metavar="N", help="threads (default: all cores)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    p.add_argument(
        "--progress",
        action="store_true",
        help="show the progress bar on stderr even when it is not a terminal",
    )


def _command(
    sub: Any,
    name: str,
    func: Callable[[argparse.Namespace], int],
    summary: str,
    description: str,
    examples: str,
) -> argparse.ArgumentParser:
    """The parser of a command that runs ``func``; its help ends with its examples and the exit
    codes."""
    parser = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples + "\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=func)
    return parser


def _test_file_and_model(p: argparse.ArgumentParser) -> None:
    """The positional arguments of the commands that apply a model file to a data file."""
    p.add_argument("test_file", metavar="TEST_FILE")
    p.add_argument("model", metavar="MODEL_FILE")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="budgetsvm",
        description="Gaussian-kernel SVMs on a budget of support vectors (BSGD, BSCA).",
        epilog="examples:\n  budgetsvm train -c 32 -g 0.0078125 -B 100 a9a a9a.model\n"
        "  budgetsvm predict a9a.t a9a.model out.txt\n  budgetsvm evaluate a9a.t a9a.model\n"
        "  budgetsvm demo\n\nRun `budgetsvm COMMAND --help` for each command's options.\n\n"
        + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = _command(
        sub,
        "train",
        _train,
        "train on a LIBSVM file, write a model file",
        TRAIN_HELP,
        TRAIN_EXAMPLES,
    )
    train.add_argument("train_file", metavar="TRAIN_FILE")
    train.add_argument("model", metavar="MODEL_FILE", nargs="?", help="default TRAIN_FILE.model")
    g = train.add_argument_group("model")
    g.add_argument(
        "-T",
        "--task",
        choices=("classification", "regression", "novelty"),
        default="classification",
        help="what to learn (default classification; novelty: one-class SVM, labels ignored)",
    )
    g.add_argument("-c", "--cost", type=float, default=1.0, metavar="C", help="C (default 1)")
    g.add_argument(
        "-L",
        "--lambda",
        dest="lam",
        type=float,
        metavar="LAMBDA",
        help="budgeted: regularisation lambda, instead of C (lambda = 1/(n C) otherwise)",
    )
    g.add_argument(
        "-g",
        "--gamma",
        default="scale",
        metavar="GAMMA",
        help="kernel width in exp(-gamma |x-x'|^2) (and the scale of poly and sigmoid): a "
        "number, 'scale' or 'auto' (default scale)",
    )
    g.add_argument(
        "-p",
        "--epsilon",
        type=float,
        default=0.1,
        help="regression: half-width of the loss-free tube (default 0.1)",
    )
    g.add_argument(
        "-n",
        "--nu",
        type=float,
        default=0.5,
        help="novelty and --nu-svm: bound on the fraction of training rows outside (the margin "
        "errors), in (0, 1] (default 0.5)",
    )
    g.add_argument(
        "--nu-svm",
        action="store_true",
        help="exact: the nu formulation (nu-SVC, nu-SVR with -c as C) with -n as its nu, "
        "instead of C-SVC / epsilon-SVR",
    )
    g.add_argument(
        "-k",
        "--kernel",
        choices=("rbf", "linear", "poly", "sigmoid", "precomputed"),
        default="rbf",
        help="exact solvers: the kernel (default rbf; the budgeted solvers are rbf only)",
    )
    g.add_argument("-d", "--degree", type=int, default=3, help="poly kernel degree (default 3)")
    g.add_argument(
        "-r", "--coef0", type=float, default=0.0, help="poly / sigmoid kernel coef0 (default 0)"
    )
    g.add_argument(
        "-B",
        "--budget",
        type=_budget_arg,
        help="budgeted: support vectors kept (default 100), or 'auto': chosen by fitting "
        "budgets 250, 500, ... on all but a held-out tenth of the rows",
    )
    g = train.add_argument_group("solver")
    g.add_argument(
        "-A",
        "--solver",
        choices=BUDGETED_SOLVERS + EXACT_SOLVERS,
        help="bsgd, bsca: budgeted SVM; alfpgm, smo: exact SVM (default bsgd for "
        "classification, bsca for regression, alfpgm for novelty)",
    )
    g.add_argument("-e", "--epochs", type=int, help="budgeted: passes over the data (default 5)")
    g.add_argument(
        "-m",
        "--maintenance",
        choices=("merge", "remove", "project"),
        help="budgeted: budget maintenance (default merge)",
    )
    g.add_argument(
        "-M",
        "--merge",
        choices=("lookup-wd", "lookup-h", "gss", "gss-precise"),
        help="budgeted: merge partner search (default lookup-wd)",
    )
    g.add_argument("-s", "--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument(
        "--no-average", action="store_true", help="BSGD classification: return the last iterate"
    )
    g.add_argument(
        "--no-polish",
        action="store_true",
        help="budgeted: keep the budgeted pass's coefficients (default: solve them and an "
        "intercept exactly over the support vectors, about the budgeted pass's time again)",
    )
    g.add_argument("--no-shuffle", action="store_true", help="budgeted: keep the file's row order")
    g.add_argument(
        "--dual-step",
        choices=("decaying", "full"),
        help="BSCA: 1/epoch of the coordinate step (default, stable) or the paper's full step",
    )
    g.add_argument(
        "--multiclass",
        choices=("auto", "ovo", "shared"),
        help="budgeted, three classes or more: one model per class pair (ovo; auto's choice "
        "from 500 support vectors per pair, in memory and with --stream) or one run whose "
        "support vectors every class shares (shared; auto's choice below)",
    )
    g.add_argument(
        "--stream",
        action="store_true",
        help="BSGD: read the file in chunks, never whole (memory: one chunk + the budget)",
    )
    g.add_argument(
        "--tol", type=float, default=1e-3, help="exact: stopping tolerance (default 0.001)"
    )
    g.add_argument(
        "--cache-size",
        type=float,
        metavar="MB",
        help="exact: kernel-row cache in MB (default: the estimator's)",
    )
    g.add_argument("--no-shrinking", action="store_true", help="exact: no shrinking")
    g.add_argument("-v", "--verbose", action="store_true", help="print the solver's progress lines")
    g = train.add_argument_group("search")
    g.add_argument(
        "--search",
        action="store_true",
        help="choose C and gamma (and the budget: -B auto, the default with --search) by "
        "cross-validation, then train the best on all rows (BudgetSVCCV, KernelSVCCV, ...)",
    )
    g.add_argument(
        "--Cs",
        type=_number_list,
        metavar="LIST",
        help="--search: the Cs, comma-separated (default 0.25,1,4,16,64; -c is not used)",
    )
    g.add_argument(
        "--gammas",
        type=_gamma_list,
        metavar="LIST",
        help="--search: the gammas, comma-separated numbers, scale or auto (default 1/4, 1 "
        "and 4 times gamma='scale'; -g is not used)",
    )
    g.add_argument(
        "--folds", type=int, default=3, help="--search: cross-validation folds (default 3)"
    )
    _common_io(train)

    predict = _command(
        sub,
        "predict",
        _predict,
        "predict labels or decision values",
        PREDICT_HELP,
        PREDICT_EXAMPLES,
    )
    _test_file_and_model(predict)
    predict.add_argument("output", metavar="OUTPUT", nargs="?", help="default stdout ('-')")
    predict.add_argument(
        "-d", "--values", action="store_true", help="write decision values instead of labels"
    )
    _common_io(predict)

    evaluate = _command(
        sub,
        "evaluate",
        _evaluate,
        "accuracy and confusion matrix on a labelled file",
        EVALUATE_HELP,
        EVALUATE_EXAMPLES,
    )
    _test_file_and_model(evaluate)
    _common_io(evaluate)

    demo = sub.add_parser(
        "demo", help="train on the embedded a9a data, gss vs lookup-wd", description=DEMO_HELP
    )
    demo.add_argument("-B", "--budget", type=int, default=100, help="budget (default 100)")
    demo.add_argument("-e", "--epochs", type=int, default=20, help="epochs (default 20)")
    demo.add_argument("-s", "--seed", type=int, default=0, help="random seed (default 0)")
    demo.set_defaults(func=_demo)
    return parser


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, already reported)
        return int(e.code or 0)
    try:
        return int(args.func(args))
    except CliError as e:
        print(f"budgetsvm {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return e.status
    except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
        name = getattr(e, "filename", None)
        what = f"{name}: {e.strerror}" if name and e.strerror else _one_line(e)
        print(f"budgetsvm {args.command}: error: {what}", file=sys.stderr)
        return EXIT_IO
    except BrokenPipeError:  # `| head` closed stdout: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as e:
        print(f"budgetsvm {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_IO
    except (ValueError, TypeError) as e:
        print(f"budgetsvm {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_DATA
    except KeyboardInterrupt:
        print("budgetsvm: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
