"""Model files: a documented, versioned, portable format that never runs code when read.

A model file is a zip archive (see ``docs/model_format.md``) holding ``header.json`` (format
name and version, classes, kernel, training parameters, statistics) and the arrays
``dual_coef.npy`` and either ``support_vectors.npy`` (dense) or, for a model with sparse
support vectors (version 2), ``support_vectors_data.npy``, ``support_vectors_indices.npy`` and
``support_vectors_indptr.npy`` (CSR); a polished model's intercepts are in the header
(version 3). Arrays are little-endian and read with ``allow_pickle=False``. Everything read is checked: a truncated, corrupted, foreign or
newer-version file raises :class:`ModelFormatError` (a ``ValueError``) with a message that
says which, and reading never executes code from the file.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from typing import Any, Dict, Union

import numpy as np

FORMAT_NAME = "budgetsvm-model"
# Version 2 adds sparse (CSR) support vectors, version 3 an intercept per output (the polish),
# version 4 regression models (BudgetSVR: "task": "regression", no classes); older files still
# load.
FORMAT_VERSION = 4
# The estimators a model file holds, by the header's "estimator".
ESTIMATORS = {"BudgetSVC": "budgetsvm.svm", "BudgetSVR": "budgetsvm.budget_svr"}
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
    """Write a fitted :class:`~budgetsvm.BudgetSVC` or :class:`~budgetsvm.BudgetSVR` to
    ``path`` (see the module doc).

    Raises ``NotFittedError`` for an unfitted estimator and ``ValueError`` for labels that a
    model file cannot hold (anything but integers, floats, strings and booleans).

    Parameters
    ----------
    clf : BudgetSVC or BudgetSVR
        A fitted estimator.
    path : str or path-like
        Where to write; an existing file is replaced.
    """
    from sklearn.utils.validation import check_is_fitted

    from budgetsvm.budget_svr import BudgetSVR
    from budgetsvm.svm import BudgetSVC

    if not isinstance(clf, (BudgetSVC, BudgetSVR)):
        raise TypeError(
            f"model files hold BudgetSVC and BudgetSVR models, not {type(clf).__name__}; save "
            f"a {type(clf).__name__} with pickle or joblib.dump"
        )
    check_is_fitted(clf)
    regression = isinstance(clf, BudgetSVR)
    # A regression model has no labels: an empty list of them.
    classes = np.zeros(0) if regression else np.asarray(clf.classes_)
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
        "estimator": type(clf).__name__,
        "kernel": {"name": "rbf", "gamma": float(clf.gamma_)},
        "n_features": int(clf.n_features_in_),
        "classes": {"dtype": classes.dtype.str, "values": classes.tolist()},
        "params": _json_value(params),
        "lambda": _json_value(getattr(clf, "lambda_", None)),
        "n_iter": int(clf.n_iter_),
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
        header["intercept"] = [float(v) for v in intercept]
    if regression:
        header["version"] = 4
        header["task"] = "regression"
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
        z.writestr("dual_coef.npy", _npy_bytes(clf.dual_coef_))


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
    """What a model file holds, read and checked without scikit-learn: the arrays that predict
    and the header. ``decision_function`` and ``predict`` give what the saved estimator gives
    (the command line predicts with it; :func:`load_model` makes the estimator from it)."""

    def __init__(self, header: Dict[str, Any], classes: np.ndarray, support_vectors: Any,
                 dual_coef: np.ndarray, intercept: np.ndarray) -> None:
        self.header = header
        self.classes = classes
        #: dense ndarray, or CSR parts (data, indices, indptr, n_cols)
        self.support_vectors = support_vectors
        self.dual_coef = dual_coef
        self.intercept = intercept
        self.gamma = float(header["kernel"]["gamma"])
        self.n_features = int(header["n_features"])

    def decision_function(self, X: Any, n_threads: Any = None) -> np.ndarray:
        """Decision values of validated rows (a float64 array or a CSR matrix of
        ``n_features`` columns): one per row for two classes, one per class otherwise."""
        from budgetsvm import _budgetsvm
        from budgetsvm._validation import to_native

        values = _budgetsvm.decision_function(
            self.support_vectors,
            np.ascontiguousarray(self.dual_coef.T),
            self.gamma,
            to_native(X),
            n_threads=n_threads,
            intercept=self.intercept,
        )
        return values[:, 0] if values.shape[1] == 1 else values

    @property
    def regression(self) -> bool:
        """A regression model (BudgetSVR): ``predict`` gives the function's values."""
        return self.header.get("task") == "regression"

    def predict(self, X: Any, n_threads: Any = None) -> np.ndarray:
        """Labels: the sign of the decision value, or the class of the largest score; for a
        regression model the predicted values."""
        values = self.decision_function(X, n_threads)
        if self.regression:
            return values
        if values.ndim == 1:
            return self.classes[(values > 0).astype(np.intp)]
        return self.classes[np.argmax(values, axis=1)]


def read_model(path: PathLike) -> SavedModel:
    """Read and check a model file without making an estimator (no scikit-learn import): the
    command line's fast path. Raises as :func:`load_model` does.

    Parameters
    ----------
    path : str or path-like
        The model file.

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
    """Read a model file written by :func:`save_model`; returns the fitted ``BudgetSVC`` or
    ``BudgetSVR``.

    Parameters
    ----------
    path : str or path-like
        The model file.

    Returns
    -------
    BudgetSVC or BudgetSVR
        The fitted estimator; it predicts exactly as the saved one did.

    Raises
    ------
    FileNotFoundError, OSError
        The file cannot be opened.
    ModelFormatError
        The file is truncated or corrupted, is not a budgetsvm model file, or was written in a
        newer format version.
    """
    import importlib

    saved = read_model(path)
    name = str(saved.header.get("estimator", "BudgetSVC"))
    if name not in ESTIMATORS:
        raise _fail(os.fspath(path), f"holds an unknown estimator {name!r}")
    cls = getattr(importlib.import_module(ESTIMATORS[name]), name)
    try:
        return _estimator(cls, saved)
    except Exception as e:  # anything inconsistent: a clear error, never a crash
        raise _fail(os.fspath(path), f"corrupted model file ({type(e).__name__}: {e})") from None


def _finite_floats(values: Any, length: int, what: str) -> np.ndarray:
    out = np.array(values, dtype=np.float64)
    if out.shape != (length,) or not np.all(np.isfinite(out)):
        raise ValueError(f"{what} must be {length} finite numbers")
    return out


def _read(z: zipfile.ZipFile, header: Dict[str, Any]) -> SavedModel:
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
    regression = header.get("task", "classification") == "regression"
    if header.get("task", "classification") not in ("classification", "regression"):
        raise ValueError(f"unknown task {header.get('task')!r}")
    n_features = header["n_features"]
    gamma = float(header["kernel"]["gamma"])
    if header["kernel"].get("name") != "rbf" or not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"unsupported kernel {header['kernel']!r}")
    if regression:
        if classes.shape != (0,) or header.get("estimator") != "BudgetSVR":
            raise ValueError("a regression model is a BudgetSVR without classes")
    elif classes.ndim != 1 or len(classes) < 2 or len(np.unique(classes)) != len(classes):
        raise ValueError("classes must be at least two distinct labels")
    n_out = 1 if len(classes) <= 2 else len(classes)
    if sv_shape[1] != n_features or coef_shape != (n_out, sv_shape[0]):
        raise ValueError(
            f"array shapes {list(sv_shape)} and {list(coef_shape)} do not fit "
            f"{n_features} features and {len(classes)} classes"
        )
    sv_format = arrays.get("support_vectors_format", "dense")
    if sv_format == "csr":
        support_vectors = _read_csr(z, sv_shape, arrays.get("support_vectors_nnz"))
    elif sv_format == "dense":
        support_vectors = _read_array(z, "support_vectors", sv_shape)
    else:
        raise ValueError(f"unknown support_vectors_format {sv_format!r}")
    dual_coef = _read_array(z, "dual_coef", coef_shape)
    intercept = (
        _finite_floats(header["intercept"], n_out, "intercept")
        if "intercept" in header
        else np.zeros(n_out)
    )
    return SavedModel(header, classes, support_vectors, dual_coef, intercept)


def _estimator(cls: Any, saved: SavedModel) -> Any:
    """The fitted estimator of a read model file."""
    import scipy.sparse as sp

    header, classes = saved.header, saved.classes
    n_features = saved.n_features
    known = cls().get_params()
    params = {k: v for k, v in dict(header.get("params", {})).items() if k in known}
    # Files from before the polish hold unpolished models.
    params.setdefault("polish", False)
    if isinstance(params.get("class_weight"), list):
        params["class_weight"] = {label: float(w) for label, w in params["class_weight"]}
    clf = cls(**params)
    if "class_weight" in header:
        clf.class_weight_ = _finite_floats(header["class_weight"], len(classes), "class_weight")
    if "probability" in header:
        n_pairs = len(classes) * (len(classes) - 1) // 2
        clf.probA_ = _finite_floats(header["probability"]["A"], n_pairs, "probability A")
        clf.probB_ = _finite_floats(header["probability"]["B"], n_pairs, "probability B")
    if not saved.regression:
        clf.classes_ = classes
    sv = saved.support_vectors
    if isinstance(sv, tuple):
        data, indices, indptr, n_cols = sv
        sv = sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, n_cols))
    clf.support_vectors_ = sv
    clf.dual_coef_ = saved.dual_coef
    clf.intercept_ = saved.intercept
    clf.gamma_ = saved.gamma
    clf.n_features_in_ = int(n_features)
    clf.n_iter_ = int(header.get("n_iter", 0))
    clf.fit_stats_ = dict(header.get("fit_stats") or {})
    if header.get("lambda") is not None:
        clf.lambda_ = float(header["lambda"])
    if "feature_names" in header:
        names = np.asarray(header["feature_names"], dtype=object)
        if names.shape != (n_features,):
            raise ValueError("feature_names do not match n_features")
        clf.feature_names_in_ = names
    clf.history_ = None
    clf._stream = None
    return clf
