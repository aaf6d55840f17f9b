"""Model files: a documented, versioned, portable format that never runs code when read.

A model file is a zip archive (see ``docs/model_format.md``) holding ``header.json`` (format
name and version, classes, kernel, training parameters, statistics) and the arrays
``dual_coef.npy`` and either ``support_vectors.npy`` (dense) or, for a model with sparse
support vectors (version 2), ``support_vectors_data.npy``, ``support_vectors_indices.npy`` and
``support_vectors_indptr.npy`` (CSR); a polished model's intercepts are in the header
(version 3); a regression model says so (version 4); an exact kernel machine (``KernelSVC``,
``KernelNuSVC``, ``KernelSVR``, ``KernelNuSVR``, ``KernelOneClassSVM``, version 5) adds
``support.npy``, its kernel's parameters and its solver's per-pair results. Arrays are little-endian and read with ``allow_pickle=False``. Everything read is checked: a truncated, corrupted, foreign or
newer-version file raises :class:`ModelFormatError` (a ``ValueError``) with a message that
says which, and reading never executes code from the file.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from typing import Any, Dict, Optional, Union

import numpy as np

from budgetsvm._validation import fitted_snapshot

FORMAT_NAME = "budgetsvm-model"
# Version 2 adds sparse (CSR) support vectors, version 3 an intercept per output (the polish),
# version 4 regression models (BudgetSVR: "task": "regression", no classes), version 5 the exact
# kernel machines (any kernel, "support" indices), version 6 BudgetSVC's one-vs-one layout
# ("one_vs_one": the support vectors grouped by class pair); older files still load.
FORMAT_VERSION = 6
# The estimators a model file holds, by the header's "estimator".
BUDGETED = {"BudgetSVC": "budgetsvm.budget_svc", "BudgetSVR": "budgetsvm.budget_svr"}
EXACT = {
    # The nu machines subclass the C ones: they come first, so that each saves as itself.
    "KernelNuSVC": "budgetsvm.kernel_nu_svc",
    "KernelNuSVR": "budgetsvm.kernel_nu_svr",
    "KernelSVC": "budgetsvm.kernel_svc",
    "KernelSVR": "budgetsvm.kernel_svr",
    "KernelOneClassSVM": "budgetsvm.kernel_one_class",
}
ESTIMATORS = {**BUDGETED, **EXACT}
# The task of each estimator: what predict gives.
TASKS = {
    "BudgetSVC": "classification",
    "BudgetSVR": "regression",
    "KernelSVC": "classification",
    "KernelNuSVC": "classification",
    "KernelSVR": "regression",
    "KernelNuSVR": "regression",
    "KernelOneClassSVM": "novelty",
}
KERNELS = ("rbf", "linear", "poly", "sigmoid", "precomputed")
HEADER = "header.json"
ARRAYS = ("support_vectors", "dual_coef")
# Label dtypes a model file can hold (numpy kinds): signed/unsigned integers, floats, unicode
# strings, booleans. Never object arrays.
LABEL_KINDS = "iufUb"
# header.json larger than this is not one budgetsvm wrote (it holds no arrays).
MAX_HEADER_BYTES = 64 << 20
# .npy header allowance on top of the data.
NPY_OVERHEAD = 4096

PathLike = Union[str, "os.PathLike[str]"]


class ModelFormatError(ValueError):
    """A file is not a readable budgetsvm model: truncated, corrupted, not a budgetsvm model file
    at all, or written by a newer budgetsvm in a format version this one cannot read."""


class ModelFileMixin:
    """``save`` and ``load`` of the estimators a model file holds (both families)."""

    @fitted_snapshot
    def save(self, path: Any) -> None:
        """Write the fitted model to a model file (``docs/model_format.md``): a versioned zip of
        a JSON header and float64 ``.npy`` arrays that loads without running code.

        The file holds what predicts (support vectors, coefficients, intercepts, classes, the
        kernel) plus the parameters and statistics; not the state that ``partial_fit``
        continues (pickle keeps that). See :func:`budgetsvm.save_model`.

        Parameters
        ----------
        path : str or path-like
            Where to write; an existing file is replaced.
        """
        from budgetsvm.modelfile import save_model

        save_model(self, path)

    @classmethod
    def load(cls, path: Any) -> Any:
        """Read a model file written by :meth:`save`: :func:`load_model`, which it calls, plus
        the check that the file holds this class (TypeError otherwise). The estimator predicts
        exactly as the saved one did; a truncated, corrupted, foreign or newer-version file
        raises :class:`budgetsvm.ModelFormatError` (a ``ValueError``).

        Parameters
        ----------
        path : str or path-like
            A file :meth:`save` wrote.

        Returns
        -------
        estimator : this class
            The fitted estimator.
        """
        from budgetsvm.modelfile import load_model

        clf = load_model(path)
        if not isinstance(clf, cls):
            raise TypeError(f"{path} holds a {type(clf).__name__}, not a {cls.__name__}")
        return clf


def _json_value(v: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, non-finite floats to None."""
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    if v is None or isinstance(v, str):
        return v
    return None  # objects (a RandomState, a callable) are not part of the file


def _npy_bytes(a: np.ndarray, dtype: str = "<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(a, dtype=dtype), allow_pickle=False)
    return buf.getvalue()


def save_model(clf: Any, path: PathLike) -> None:
    """Write a fitted estimator to ``path`` (see the module doc): a :class:`~budgetsvm.BudgetSVC`,
    :class:`~budgetsvm.BudgetSVR`, :class:`~budgetsvm.KernelSVC`, :class:`~budgetsvm.KernelNuSVC`,
    :class:`~budgetsvm.KernelSVR`, :class:`~budgetsvm.KernelNuSVR` or
    :class:`~budgetsvm.KernelOneClassSVM`.

    Raises ``NotFittedError`` for an unfitted estimator and ``ValueError`` for labels that a
    model file cannot hold (anything but integers, floats, strings and booleans) and for a
    callable kernel (a file never holds code).

    Parameters
    ----------
    clf : BudgetSVC, BudgetSVR, KernelSVC, KernelNuSVC, KernelSVR, KernelNuSVR or
        KernelOneClassSVM
        A fitted estimator.
    path : str or path-like
        Where to write; an existing file is replaced.
    """
    from sklearn.utils.validation import check_is_fitted

    name = _estimator_name(clf)
    check_is_fitted(clf)
    if callable(getattr(clf, "kernel", None)):
        raise ValueError(
            "a model with a callable kernel cannot be saved to a model file: the file names its "
            "kernel and never holds code; pickle the estimator (with a kernel function "
            "importable where it is loaded), or precompute the kernel (kernel='precomputed')"
        )
    task = TASKS[name]
    # Regression and novelty models have no labels: an empty list of them.
    classes = np.asarray(clf.classes_) if task == "classification" else np.zeros(0)
    if classes.dtype.kind == "O":
        kinds = {type(c) for c in classes}
        if kinds <= {str}:
            classes = classes.astype(str)
        elif all(issubclass(k, (int, np.integer)) and not issubclass(k, bool) for k in kinds):
            classes = classes.astype(np.int64)
    if classes.dtype.kind not in LABEL_KINDS:
        raise ValueError(
            f"cannot save class labels of dtype {classes.dtype} in a model file; use integer, "
            "float, string or boolean labels (or pickle the estimator)"
        )
    params = clf.get_params()
    if not isinstance(params.get("random_state"), (int, type(None))):
        params["random_state"] = None
    if isinstance(params.get("class_weight"), dict):
        # JSON keys are strings; pairs keep the labels' types.
        params["class_weight"] = [[k, v] for k, v in params["class_weight"].items()]
    header: Dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": 1,
        "created_by": f"budgetsvm {__import__('budgetsvm').__version__}",
        "estimator": name,
        "kernel": {"name": "rbf", "gamma": float(clf.gamma_)},
        "n_features": int(clf.n_features_in_),
        "classes": {"dtype": classes.dtype.str, "values": classes.tolist()},
        "params": _json_value(params),
        "fit_stats": _json_value(getattr(clf, "fit_stats_", {})),
        "arrays": {
            "support_vectors": list(clf.support_vectors_.shape),
            "dual_coef": list(clf.dual_coef_.shape),
        },
    }
    import scipy.sparse as sp

    sparse = sp.issparse(clf.support_vectors_)
    if sparse:
        sv = sp.csr_matrix(clf.support_vectors_)
        sv.sort_indices()
        # Dense models stay version 1, readable by every budgetsvm; sparse ones need version 2.
        header["version"] = 2
        header["arrays"]["support_vectors_format"] = "csr"
        header["arrays"]["support_vectors_nnz"] = int(sv.nnz)
    intercept = np.asarray(getattr(clf, "intercept_", np.zeros(clf.dual_coef_.shape[0])))
    if np.any(intercept != 0):
        # An older reader would drop the intercept and predict differently: version 3.
        header["version"] = 3
    if np.any(intercept != 0) or name in EXACT:
        header["intercept"] = [float(v) for v in intercept]
    if task == "regression":
        header["version"] = 4
        header["task"] = task
    pair_groups = getattr(clf, "n_support_per_pair_", None)
    if pair_groups is not None:
        # One coefficient row for grouped vectors and an intercept per pair: an older reader
        # would take the pairs for one output.
        header["version"] = 6
        header["intercept"] = [float(v) for v in intercept]
        header["one_vs_one"] = {"n_support_per_pair": [int(c) for c in pair_groups]}
    if name in EXACT:
        # Another kernel, support indices and the per-pair intercepts: an older reader would
        # take it for a budgeted Gaussian model.
        header["version"] = 5
        header["task"] = task
        header["kernel"] = {
            "name": clf.kernel,
            "gamma": float(clf.gamma_),
            "degree": int(clf.degree),
            "coef0": float(clf.coef0),
        }
        header["arrays"]["support"] = [len(clf.support_)]
        header["exact"] = _json_value(
            {
                "n_support": np.asarray(clf.n_support_).tolist(),
                "n_iter": np.asarray(clf.n_iter_).tolist(),
                "dual_objective": np.asarray(clf.dual_objective_).tolist(),
                "fit_status": clf.fit_status_,
                "shape_fit": list(clf.shape_fit_),
            }
        )
    else:
        header["lambda"] = _json_value(getattr(clf, "lambda_", None))
        header["n_iter"] = int(clf.n_iter_)
    if hasattr(clf, "class_weight_"):
        header["class_weight"] = _json_value(np.asarray(clf.class_weight_).tolist())
    if hasattr(clf, "probA_"):
        header["probability"] = {
            "A": _json_value(clf.probA_.tolist()),
            "B": _json_value(clf.probB_.tolist()),
        }
    names = getattr(clf, "feature_names_in_", None)
    if names is not None:
        header["feature_names"] = [str(n) for n in names]
    text = json.dumps(header, indent=1, allow_nan=False).encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(HEADER, text)
        if sparse:
            z.writestr("support_vectors_data.npy", _npy_bytes(sv.data))
            z.writestr("support_vectors_indices.npy", _npy_bytes(sv.indices, "<i8"))
            z.writestr("support_vectors_indptr.npy", _npy_bytes(sv.indptr, "<i8"))
        else:
            z.writestr("support_vectors.npy", _npy_bytes(clf.support_vectors_))
        dual_coef = clf.dual_coef_
        z.writestr(
            "dual_coef.npy",
            _npy_bytes(dual_coef.toarray() if sp.issparse(dual_coef) else dual_coef),
        )
        if name in EXACT:
            z.writestr("support.npy", _npy_bytes(clf.support_, "<i8"))


def _estimator_name(clf: Any) -> str:
    """The model-file estimator that ``clf`` is (a subclass saves as its base)."""
    import importlib

    for name, module in ESTIMATORS.items():
        if isinstance(clf, getattr(importlib.import_module(module), name)):
            return name
    kind = type(clf).__name__
    raise TypeError(
        f"model files hold {', '.join(ESTIMATORS)} models, not {kind}; save a {kind} with "
        "pickle or joblib.dump"
    )


def _fail(path: Any, what: str) -> ModelFormatError:
    return ModelFormatError(f"{os.fspath(path)}: {what}")


def _shape(value: Any, ndim: int) -> tuple:
    if (
        not isinstance(value, list)
        or len(value) != ndim
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        raise ValueError(f"bad array shape {value!r}")
    return tuple(value)


def _read_array(z: zipfile.ZipFile, name: str, shape: tuple, kind: str = "f") -> np.ndarray:
    """Array ``name`` of the given shape: float64 (kind 'f', finite) or int64 (kind 'i')."""
    member = f"{name}.npy"
    info = z.getinfo(member)  # KeyError when missing
    expected = 8 * int(np.prod(shape, dtype=np.int64)) + NPY_OVERHEAD
    if info.file_size > expected:
        raise ValueError(f"{member} is larger than its shape {list(shape)} allows")
    with z.open(member) as f:
        a = np.lib.format.read_array(io.BytesIO(f.read()), allow_pickle=False)
    want = np.dtype("float64") if kind == "f" else np.dtype("int64")
    if a.dtype.newbyteorder("=") != want:
        raise ValueError(f"{member} has dtype {a.dtype}, expected {want}")
    if a.shape != shape:
        raise ValueError(f"{member} has shape {list(a.shape)}, the header says {list(shape)}")
    if kind == "f" and not np.all(np.isfinite(a)):
        raise ValueError(f"{member} contains NaN or infinity")
    return np.ascontiguousarray(a, dtype=want)


def _read_csr(z: zipfile.ZipFile, shape: tuple, nnz: Any) -> tuple:
    """The CSR support vectors of a version 2 file, every invariant checked, as the parts
    (data, indices, indptr, n_cols) the engine takes."""
    if not isinstance(nnz, int) or isinstance(nnz, bool) or nnz < 0:
        raise ValueError(f"bad support_vectors_nnz {nnz!r}")
    n_rows, n_cols = shape
    data = _read_array(z, "support_vectors_data", (nnz,))
    indices = _read_array(z, "support_vectors_indices", (nnz,), kind="i")
    indptr = _read_array(z, "support_vectors_indptr", (n_rows + 1,), kind="i")
    if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
        raise ValueError("support_vectors_indptr is not a valid CSR row pointer")
    if nnz and (indices.min() < 0 or indices.max() >= n_cols):
        raise ValueError(f"support_vectors_indices out of range [0, {n_cols})")
    # Sorted, distinct columns within each row: increasing except across row starts.
    steps = np.diff(indices) > 0
    row_starts = indptr[1:-1]
    row_starts = row_starts[(row_starts > 0) & (row_starts < nnz)] - 1
    steps[row_starts] = True
    if not np.all(steps):
        raise ValueError("support_vectors_indices are not sorted and distinct within rows")
    return (data, indices, indptr, n_cols)


class SavedModel:
    """What a model file holds, read and checked: the arrays that predict and the header.
    ``decision_function`` and ``predict`` give what the saved estimator gives (the command line
    predicts with it; :func:`load_model` makes the estimator from it). A budgeted model predicts
    through the engine directly, without scikit-learn; an exact kernel machine through its
    estimator, made on first use."""

    def __init__(
        self,
        header: Dict[str, Any],
        classes: np.ndarray,
        support_vectors: Any,
        dual_coef: np.ndarray,
        intercept: np.ndarray,
        support: Optional[np.ndarray] = None,
    ) -> None:
        self.header = header
        #: the labels predict gives (-1 and +1 for novelty detection; none for regression)
        self.classes = np.array([-1, 1]) if TASKS[self.estimator] == "novelty" else classes
        #: dense ndarray, or CSR parts (data, indices, indptr, n_cols)
        self.support_vectors = support_vectors
        self.dual_coef = dual_coef
        self.intercept = intercept
        #: the support vectors' training rows (exact kernel machines), else None
        self.support = support
        self.gamma = float(header["kernel"]["gamma"])
        self.n_features = int(header["n_features"])
        #: BudgetSVC's one-vs-one layout: support vectors per class pair, else None
        self.pair_groups: Optional[np.ndarray] = None
        self._fitted: Any = None

    @property
    def estimator(self) -> str:
        """The saved estimator's class name."""
        return str(self.header.get("estimator", "BudgetSVC"))

    @property
    def task(self) -> str:
        """'classification', 'regression' or 'novelty' (+1 inside, -1 outside)."""
        return TASKS[self.estimator]

    @property
    def regression(self) -> bool:
        """A regression model: ``predict`` gives the function's values."""
        return self.task == "regression"

    @property
    def kernel(self) -> str:
        return str(self.header["kernel"]["name"])

    def fitted_estimator(self) -> Any:
        """The estimator this file holds (made once, then reused)."""
        if self._fitted is None:
            import importlib

            cls = getattr(importlib.import_module(ESTIMATORS[self.estimator]), self.estimator)
            self._fitted = _estimator(cls, self)
        return self._fitted

    def decision_function(self, X: Any, n_threads: Any = None) -> np.ndarray:
        """Decision values of validated rows (a float64 array or a CSR matrix of
        ``n_features`` columns): one per row for two classes, regression and novelty, one per
        class otherwise."""
        if self.estimator in EXACT:
            # SVR's decision function is its prediction (it has no decision_function).
            method = "predict" if self.regression else "decision_function"
            return self._through_estimator(method, X, n_threads)
        from budgetsvm import _budgetsvm
        from budgetsvm._validation import to_native

        groups = self.pair_groups
        values = _budgetsvm.decision_function(
            self.support_vectors,
            np.ascontiguousarray(self.dual_coef if groups is not None else self.dual_coef.T),
            self.gamma,
            to_native(X),
            n_threads=n_threads,
            group_counts=groups,
            intercept=self.intercept,
        )
        if groups is not None:
            from budgetsvm._one_vs_one import ovr_scores

            return ovr_scores(values, len(self.classes))
        return values[:, 0] if values.shape[1] == 1 else values

    def predict(self, X: Any, n_threads: Any = None) -> np.ndarray:
        """Labels (the sign of the decision value, or the class of the largest score; +1 / -1
        for novelty detection), or for a regression model the predicted values."""
        if self.estimator in EXACT:
            return self._through_estimator("predict", X, n_threads)
        values = self.decision_function(X, n_threads)
        if self.regression:
            return values
        if values.ndim == 1:
            return self.classes[(values > 0).astype(np.intp)]
        return self.classes[np.argmax(values, axis=1)]

    def _through_estimator(self, method: str, X: Any, n_threads: Any) -> np.ndarray:
        import scipy.sparse as sp

        clf = self.fitted_estimator()
        if self.kernel == "precomputed" and sp.issparse(X):
            # Kernel values read from a LIBSVM-format file arrive sparse.
            X = X.toarray()
        n_jobs = clf.n_jobs
        clf.n_jobs = n_threads if n_threads is not None else n_jobs
        try:
            return np.asarray(getattr(clf, method)(X))
        finally:
            clf.n_jobs = n_jobs


def read_model(path: PathLike) -> SavedModel:
    """Read and check a model file without making an estimator (no scikit-learn import): the
    command line's fast path. Raises as :func:`load_model` does.

    Parameters
    ----------
    path : str or path-like
        A model file, as :func:`load_model` reads it.

    Returns
    -------
    SavedModel
        The file's arrays and header.
    """
    path = os.fspath(path)
    with open(path, "rb") as raw:  # OSError / FileNotFoundError as they are
        data = raw.read()
    if not data.startswith(b"PK"):
        raise _fail(path, "not a budgetsvm model file (not a zip archive)")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except Exception as e:  # zipfile raises several types for a broken directory
        raise _fail(path, f"truncated or corrupted model file ({e})") from None
    with z:
        try:
            info = z.getinfo(HEADER)
        except KeyError:
            raise _fail(path, "not a budgetsvm model file (no header.json)") from None
        try:
            if info.file_size > MAX_HEADER_BYTES:
                raise ValueError("header.json is too large")
            header = json.loads(z.read(HEADER).decode("utf-8"))
        except Exception as e:  # bad zip structure, CRC, zlib stream, JSON or UTF-8
            raise _fail(path, f"truncated or corrupted model file ({e})") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise _fail(path, f"not a budgetsvm model file (format is not {FORMAT_NAME!r})")
        version = header.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise _fail(path, f"corrupted model file (format version {version!r})")
        if version > FORMAT_VERSION:
            raise _fail(
                path,
                f"written by a newer budgetsvm (model format version {version}); this "
                f"budgetsvm reads versions up to {FORMAT_VERSION}: upgrade budgetsvm",
            )
        try:
            return _read(z, header)
        except ModelFormatError:
            raise
        except Exception as e:  # anything inconsistent: a clear error, never a crash
            raise _fail(path, f"corrupted model file ({type(e).__name__}: {e})") from None


def load_model(path: PathLike) -> Any:
    """Read a model file written by :func:`save_model`; returns the fitted estimator
    (``BudgetSVC``, ``BudgetSVR``, ``KernelSVC``, ``KernelNuSVC``, ``KernelSVR``, ``KernelNuSVR``
    or ``KernelOneClassSVM``).

    Parameters
    ----------
    path : str or path-like
        The model file.

    Returns
    -------
    estimator
        The fitted estimator; it predicts exactly as the saved one did.

    Raises
    ------
    FileNotFoundError, OSError
        The file cannot be opened.
    ModelFormatError
        The file is truncated or corrupted, is not a budgetsvm model file, or was written in a
        newer format version.
    """
    saved = read_model(path)
    try:
        return saved.fitted_estimator()
    except Exception as e:  # anything inconsistent: a clear error, never a crash
        raise _fail(os.fspath(path), f"corrupted model file ({type(e).__name__}: {e})") from None


def _finite_floats(values: Any, length: int, what: str) -> np.ndarray:
    out = np.array(values, dtype=np.float64)
    if out.shape != (length,) or not np.all(np.isfinite(out)):
        raise ValueError(f"{what} must be {length} finite numbers")
    return out


def _count(value: Any, what: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_kernel(kernel: Any, exact: bool) -> None:
    name = kernel.get("name")
    gamma = float(kernel["gamma"])
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"bad kernel gamma {kernel['gamma']!r}")
    if not exact:
        if name != "rbf":
            raise ValueError(f"unsupported kernel {kernel!r}")
        return
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}")
    if _count(kernel["degree"], "kernel degree") > 64:
        raise ValueError(f"kernel degree {kernel['degree']} is above 64")
    if not math.isfinite(float(kernel["coef0"])):
        raise ValueError("kernel coef0 is not finite")


def _read(z: zipfile.ZipFile, header: Dict[str, Any]) -> SavedModel:
    name = header.get("estimator", "BudgetSVC")
    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}")
    exact = name in EXACT
    task = header.get("task", "classification")
    if task != TASKS[name]:
        raise ValueError(f"a {name} model's task is {TASKS[name]!r}, not {task!r}")
    arrays = header["arrays"]
    sv_shape = _shape(arrays["support_vectors"], 2)
    coef_shape = _shape(arrays["dual_coef"], 2)
    classes_info = header["classes"]
    dtype = np.dtype(str(classes_info["dtype"]))
    if dtype.kind not in LABEL_KINDS:
        raise ValueError(f"class labels of dtype {dtype} are not allowed")
    values = classes_info["values"]
    if not isinstance(values, list):
        raise ValueError("class labels must be a list")
    if dtype.kind == "U":
        # The declared width sizes the array: never wider than the labels need (or 1024).
        longest = max((len(v) for v in values if isinstance(v, str)), default=0)
        if dtype.itemsize // 4 > max(1024, longest):
            raise ValueError(f"label dtype {dtype.str} is far wider than its labels")
    elif dtype.itemsize > 16:
        raise ValueError(f"label dtype {dtype.str} is not a label type")
    classes = np.array(values, dtype=dtype)
    n_features = _count(header["n_features"], "n_features")
    _check_kernel(header["kernel"], exact)
    if task != "classification":
        if classes.shape != (0,):
            raise ValueError(f"a {task} model has no classes")
        n_out = 1
    elif classes.ndim != 1 or len(classes) < 2 or len(np.unique(classes)) != len(classes):
        raise ValueError("classes must be at least two distinct labels")
    else:
        # The exact SVC's one-vs-one layout has n_classes - 1 rows of coefficients, BudgetSVC's
        # one row (each vector in its own pair's output).
        n_out = max(len(classes) - 1, 1) if exact else (1 if len(classes) == 2 else len(classes))
    n_sv = coef_shape[1]
    pair_groups = None
    if "one_vs_one" in header:
        if exact or task != "classification" or len(classes) < 3:
            raise ValueError("one_vs_one is for a BudgetSVC of three classes or more")
        n_pairs = len(classes) * (len(classes) - 1) // 2
        counts = header["one_vs_one"].get("n_support_per_pair")
        if not isinstance(counts, list) or len(counts) != n_pairs:
            raise ValueError(f"one_vs_one n_support_per_pair must list {n_pairs} counts")
        pair_groups = np.array([_count(c, "n_support_per_pair") for c in counts], dtype=np.int64)
        if int(pair_groups.sum()) != n_sv:
            raise ValueError(f"n_support_per_pair does not add up to the {n_sv} support vectors")
        n_out = 1
    precomputed = header["kernel"]["name"] == "precomputed"
    # A precomputed kernel's model holds no vectors, only their training rows (support).
    want_sv = (0, 0) if precomputed else (n_sv, n_features)
    if sv_shape != want_sv or coef_shape != (n_out, n_sv):
        raise ValueError(
            f"array shapes {list(sv_shape)} and {list(coef_shape)} do not fit "
            f"{n_features} features, {n_sv} support vectors and {len(classes)} classes"
        )
    sv_format = arrays.get("support_vectors_format", "dense")
    if sv_format == "csr":
        support_vectors = _read_csr(z, sv_shape, arrays.get("support_vectors_nnz"))
    elif sv_format == "dense":
        support_vectors = _read_array(z, "support_vectors", sv_shape)
    else:
        raise ValueError(f"unknown support_vectors_format {sv_format!r}")
    dual_coef = _read_array(z, "dual_coef", coef_shape)
    support = None
    n_intercepts = n_out if pair_groups is None else len(pair_groups)
    if exact:
        n_intercepts = len(classes) * (len(classes) - 1) // 2 if task == "classification" else 1
        _check_exact(header, classes, n_sv, n_features, n_intercepts)
        support = _read_array(z, "support", (n_sv,), kind="i")
        n_rows = header["exact"]["shape_fit"][0]
        if n_sv and (support.min() < 0 or support.max() >= n_rows):
            raise ValueError(f"support indices out of range [0, {n_rows})")
    if "intercept" in header:
        intercept = _finite_floats(header["intercept"], n_intercepts, "intercept")
    elif exact or pair_groups is not None:
        raise ValueError("the model's intercepts are missing")
    else:
        intercept = np.zeros(n_out)
    saved = SavedModel(header, classes, support_vectors, dual_coef, intercept, support)
    saved.pair_groups = pair_groups
    return saved


def _check_exact(
    header: Dict[str, Any], classes: np.ndarray, n_sv: int, n_features: int, n_pairs: int
) -> None:
    """The exact machine's solver results: per class (n_support) and per pair (n_iter,
    dual_objective) for SVC, one of each otherwise."""
    info = header["exact"]
    n_support = info["n_support"]
    per_class = len(classes) if len(classes) else 1
    if not isinstance(n_support, list) or len(n_support) != per_class:
        raise ValueError(f"n_support must list {per_class} counts")
    if sum(_count(c, "n_support") for c in n_support) != n_sv:
        raise ValueError(f"n_support does not add up to the {n_sv} support vectors")
    shape_fit = info["shape_fit"]
    if not isinstance(shape_fit, list) or len(shape_fit) != 2:
        raise ValueError("shape_fit must be [n_samples, n_features]")
    _count(shape_fit[0], "shape_fit rows", 1)
    if header["kernel"]["name"] == "precomputed" and shape_fit != [n_features, n_features]:
        raise ValueError("a precomputed kernel's shape_fit is n_features x n_features")
    if info["fit_status"] not in (0, 1):
        raise ValueError(f"fit_status must be 0 or 1, got {info['fit_status']!r}")
    if len(classes):
        if not isinstance(info["n_iter"], list) or len(info["n_iter"]) != n_pairs:
            raise ValueError(f"n_iter must list {n_pairs} counts")
        for v in info["n_iter"]:
            _count(v, "n_iter")
        _finite_floats(info["dual_objective"], n_pairs, "dual_objective")
    else:
        _count(info["n_iter"], "n_iter")
        _finite_floats([info["dual_objective"]], 1, "dual_objective")


def _estimator(cls: Any, saved: SavedModel) -> Any:
    """The fitted estimator of a read model file."""
    import scipy.sparse as sp

    header, classes = saved.header, saved.classes
    n_features = saved.n_features
    known = cls().get_params()
    params = {k: v for k, v in dict(header.get("params", {})).items() if k in known}
    exact = saved.estimator in EXACT
    if exact:
        # The kernel is the header's (what the arrays were fitted with), whatever params say.
        kernel = header["kernel"]
        params.update(
            kernel=kernel["name"], degree=int(kernel["degree"]), coef0=float(kernel["coef0"])
        )
    else:
        # Files from before the polish hold unpolished models.
        params.setdefault("polish", False)
    if isinstance(params.get("class_weight"), list):
        params["class_weight"] = {label: float(w) for label, w in params["class_weight"]}
    clf = cls(**params)
    if "class_weight" in header:
        clf.class_weight_ = _finite_floats(header["class_weight"], len(classes), "class_weight")
    n_pairs = len(classes) * (len(classes) - 1) // 2
    if "probability" in header:
        clf.probA_ = _finite_floats(header["probability"]["A"], n_pairs, "probability A")
        clf.probB_ = _finite_floats(header["probability"]["B"], n_pairs, "probability B")
    if saved.task == "classification":
        clf.classes_ = classes
    sv = saved.support_vectors
    if isinstance(sv, tuple):
        data, indices, indptr, n_cols = sv
        sv = sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, n_cols))
    clf.support_vectors_ = sv
    # An exact model fitted on sparse rows keeps a sparse dual_coef_ (as scikit-learn's).
    sparse_coef = exact and sp.issparse(sv)
    clf.dual_coef_ = sp.csr_matrix(saved.dual_coef) if sparse_coef else saved.dual_coef
    clf.intercept_ = saved.intercept
    clf.gamma_ = saved.gamma
    clf.n_features_in_ = int(n_features)
    clf.fit_stats_ = dict(header.get("fit_stats") or {})
    if "feature_names" in header:
        names = np.asarray(header["feature_names"], dtype=object)
        if names.shape != (n_features,):
            raise ValueError("feature_names do not match n_features")
        clf.feature_names_in_ = names
    if exact:
        info = header["exact"]
        clf.support_ = np.asarray(saved.support, dtype=np.int32)
        clf.n_support_ = np.asarray(info["n_support"], dtype=np.int32)
        clf.shape_fit_ = tuple(info["shape_fit"])
        clf.fit_status_ = int(info["fit_status"])
        if saved.task == "classification":
            clf.n_iter_ = np.asarray(info["n_iter"], dtype=np.int64)
            clf.dual_objective_ = np.asarray(info["dual_objective"], dtype=np.float64)
            # SVC's binary sign convention (intercept_ = rho) against LIBSVM's (-rho).
            clf._rho = saved.intercept.copy() if len(classes) == 2 else -saved.intercept
        else:
            clf.n_iter_ = int(info["n_iter"])
            clf.dual_objective_ = float(info["dual_objective"])
        if saved.task == "novelty":
            clf.offset_ = float(-saved.intercept[0])
        return clf
    if saved.task == "classification":
        n_classes = len(classes)
        clf.multiclass_ = (
            "binary" if n_classes == 2 else ("ovo" if saved.pair_groups is not None else "shared")
        )
        clf.n_support_per_pair_ = saved.pair_groups
    clf.n_iter_ = int(header.get("n_iter", 0))
    search = clf.fit_stats_.get("budget_search")
    # A fit with budget='auto' recorded its choice; a file from before budget_ has the number.
    clf.budget_ = int(search["budget"]) if isinstance(search, dict) else (
        int(clf.budget) if not isinstance(clf.budget, str) else int(sv.shape[0])
    )
    if header.get("lambda") is not None:
        clf.lambda_ = float(header["lambda"])
    clf.history_ = None
    clf._stream = None
    return clf
