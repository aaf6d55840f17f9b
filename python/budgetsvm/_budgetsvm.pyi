"""Type stubs of the native module (checked against the binary by mypy.stubtest in CI)."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt
from typing_extensions import NotRequired, TypedDict, Unpack, final

# Dense C-contiguous float64 matrix, or CSR parts (data, indices, indptr, n_cols).
_Features = Union[npt.NDArray[np.float64], Tuple[Any, Any, Any, int]]
_Targets = Union[npt.NDArray[np.uint32], npt.NDArray[np.float64]]
_Callback = Optional[Callable[[Dict[str, Any]], Any]]
# Rows read from a LIBSVM file: CSR parts (data, indices, indptr), the labels, the width.
_LibsvmRows = Tuple[
    npt.NDArray[np.float64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.float64],
    int,
]

# The keyword groups the entry points take as ``**options`` (the binding's `keyword_group!`s).
class _BudgetSettings(TypedDict):
    c: float
    gamma: float
    budget: int
    maintenance: str
    merge: str
    seed: int
    shuffle: NotRequired[bool]
    sv_storage: NotRequired[str]
    epsilon: NotRequired[Optional[float]]

class _BsgdSettings(TypedDict, total=False):
    average: bool
    lambda_: Optional[float]

class _FitSettings(TypedDict):
    epochs: int
    compare_with: NotRequired[Optional[str]]
    average_placement: NotRequired[bool]
    sample_weight: NotRequired[Optional[npt.NDArray[np.float64]]]
    callback: NotRequired[_Callback]
    observer: NotRequired[_Callback]

class _ExpansionArrays(TypedDict):
    support_vectors: _Features
    coef: npt.NDArray[np.float64]
    gamma: float

class _PolishSettings(TypedDict):
    c: float
    tol: NotRequired[float]
    max_iter: NotRequired[int]
    cache_size: NotRequired[float]
    intercept: NotRequired[Optional[npt.NDArray[np.float64]]]
    callback: NotRequired[_Callback]
    epsilon: NotRequired[Optional[float]]
    n_threads: NotRequired[Optional[int]]
    hessian_free_from: NotRequired[Optional[int]]

class _FitBsgdOptions(_BudgetSettings, _FitSettings, _BsgdSettings): ...
class _FitBscaOptions(_BudgetSettings, _FitSettings): ...
class _StreamOptions(_BudgetSettings, _BsgdSettings): ...
class _PolishOptions(_ExpansionArrays, _PolishSettings): ...

class _FitPairsOptions(_BudgetSettings, _FitSettings):
    lambda_: NotRequired[Optional[float]]

__all__ = [
    "BsgdStream",
    "LibsvmChunkReader",
    "summarize_libsvm",
    "decision_function",
    "feature_variance",
    "fit_bsca",
    "fit_pairs",
    "partial_fit_pairs",
    "fit_bsgd",
    "fit_exact",
    "decision_from_kernel",
    "get_num_threads",
    "requested_num_threads",
    "kernel_rows",
    "load_libsvm",
    "merge_search",
    "polish",
    "polish_file",
    "polish_newton_point",
    "polish_settled_step",
    "polish_line_walk",
    "add_gram_change",
    "reduce_budget",
    "PolishPartition",
    "PolishPreconditioner",
    "rbf_kernel",
    "set_num_threads",
    "simd_level",
    "__version__",
    "DEFAULT_TABLE_SIZE",
    "MAX_THREADS",
    "HESSIAN_FREE_BASIS",
    "POLISH_MAX_CG_PRODUCTS",
    "POLISH_RESCALE_FACTOR",
    "POLISH_CG_TOL",
    "POLISH_NO_CURVATURE",
]

__version__: str
DEFAULT_TABLE_SIZE: int
MAX_THREADS: int
HESSIAN_FREE_BASIS: int
POLISH_MAX_CG_PRODUCTS: int
POLISH_RESCALE_FACTOR: float
POLISH_CG_TOL: Tuple[float, float]
POLISH_NO_CURVATURE: float

def rbf_kernel(
    x: _Features, y: _Features, gamma: float, *, n_threads: Optional[int] = None
) -> npt.NDArray[np.float64]: ...
def merge_search(
    m: npt.NDArray[np.float64],
    kappa: npt.NDArray[np.float64],
    method: str,
    table_size: Optional[int] = None,
) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
def fit_bsgd(
    x: _Features, y: _Targets, n_classes: int, **options: Unpack[_FitBsgdOptions]
) -> Dict[str, Any]: ...
def fit_bsca(
    x: _Features,
    y: _Targets,
    n_classes: int,
    *,
    dual_step: str = "decaying",
    average: bool = False,
    start: Optional[_ExpansionArrays] = None,
    start_alpha: Optional[npt.NDArray[np.float64]] = None,
    epochs_done: int = 0,
    return_alpha: bool = False,
    **options: Unpack[_FitBscaOptions],
) -> Dict[str, Any]: ...
def fit_pairs(
    x: _Features,
    y: npt.NDArray[np.uint32],
    pairs: Sequence[Tuple[npt.NDArray[np.int64], int, int, float]],
    *,
    solver: str,
    dual_step: str = "decaying",
    average: bool = True,
    n_threads: Optional[int] = None,
    **options: Unpack[_FitPairsOptions],
) -> List[Dict[str, Any]]: ...
def partial_fit_pairs(
    streams: Sequence[BsgdStream],
    x: _Features,
    y: npt.NDArray[np.uint32],
    pairs: Sequence[Tuple[int, int]],
    *,
    sample_weight: Optional[npt.NDArray[np.float64]] = None,
    average_placement: bool = True,
    n_threads: Optional[int] = None,
    pair_rows: Optional[Sequence[npt.NDArray[np.int64]]] = None,
) -> None: ...
def fit_exact(
    x: _Features,
    target: Optional[npt.NDArray[Any]],
    *,
    problem: str,
    n_classes: int = 0,
    c: float = 1.0,
    epsilon: float = 0.1,
    nu: float = 0.5,
    kernel: str = "rbf",
    gamma: float = 1.0,
    coef0: float = 0.0,
    degree: int = 3,
    solver: str = "alfpgm",
    shrinking: bool = True,
    shared_rows: bool = True,
    tol: float = 1e-3,
    cache_size: float = 200.0,
    max_iter: int = 0,
    n_threads: Optional[int] = None,
    n_pairs: int = 50,
    min_alpha_opt: int = 5,
    max_alpha_opt: int = 500,
    min_alpha_check: int = 0,
    pair_ratio: float = 0.5,
    alpha_delta_threshold: float = 1e-5,
    al_penalty: float = 0.0,
    al_max_iter: int = 20,
    fista_max_iter: int = 500,
    inner_tol_factor: float = 0.1,
    inner_rel: float = 0.1,
    power_iters: int = 8,
    lipschitz_safety: float = 1.1,
    restart: bool = True,
    inner: str = "smo",
    report_every: Optional[float] = None,
    callback: Optional[Callable[[Dict[str, Any]], Any]] = None,
    sample_weight: Optional[npt.NDArray[np.float64]] = None,
    kernel_rows: Optional[Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]]] = None,
    diagonal: Optional[npt.NDArray[np.float64]] = None,
    row_precision: str = "auto",
    cs: Optional[Sequence[float]] = None,
) -> List[Dict[str, Any]]: ...
def polish(
    x: _Features,
    y: _Targets,
    n_classes: int,
    *,
    sample_weight: Optional[npt.NDArray[np.float64]] = None,
    **options: Unpack[_PolishOptions],
) -> Dict[str, Any]: ...
def polish_file(
    path: str,
    chunk_rows: int,
    width: int,
    classes: npt.NDArray[np.float64],
    *,
    class_weights: Optional[npt.NDArray[np.float64]] = None,
    pair: Optional[Tuple[int, int]] = None,
    **options: Unpack[_PolishOptions],
) -> Dict[str, Any]: ...
def polish_newton_point(
    kss: npt.NDArray[np.float64],
    gram: npt.NDArray[np.float64],
    s: npt.NDArray[np.float64],
    u: npt.NDArray[np.float64],
    sw: float,
    swy: float,
    c: float,
    intercept: float,
) -> npt.NDArray[np.float64]: ...
def polish_settled_step(a: float, b: float, flips: bool, exact_step: bool) -> Optional[float]: ...
def polish_line_walk(
    walk: Tuple[float, float, float],
    t: npt.NDArray[np.float64],
    da: npt.NDArray[np.float64],
    db: npt.NDArray[np.float64],
    complete_to: float,
) -> Tuple[Optional[float], Tuple[float, float, float]]: ...
def add_gram_change(
    gram: npt.NDArray[np.float64],
    *,
    packed: Optional[npt.NDArray[np.float64]] = None,
    weights: Optional[npt.NDArray[np.float64]] = None,
    rows: Optional[npt.NDArray[np.float64]] = None,
) -> None: ...
def reduce_budget(
    budget: int,
    *,
    maintenance: str = "merge",
    merge: str = "lookup-wd",
    sv_storage: str = "auto",
    opposite_sign_merges: bool = False,
    **model: Unpack[_ExpansionArrays],
) -> Tuple[Any, npt.NDArray[np.float64], float]: ...

@final
class PolishPartition:
    def __new__(
        cls,
        support_vectors: _Features,
        gamma: float,
        x: _Features,
        y: Union[npt.NDArray[np.uint32], npt.NDArray[np.float64]],
        n_classes: int,
        *,
        sample_weight: Optional[npt.NDArray[np.float64]] = None,
        epsilon: Optional[float] = None,
    ) -> PolishPartition: ...
    @property
    def nbytes(self) -> int: ...
    def line_changes(
        self,
        counted_coef: npt.NDArray[np.float64],
        counted_intercept: npt.NDArray[np.float64],
        dir_coef: npt.NDArray[np.float64],
        dir_intercept: npt.NDArray[np.float64],
        c: float,
        start: npt.NDArray[np.float64],
        most: int,
    ) -> Dict[str, Any]: ...
    def sums(
        self,
        trial_coef: npt.NDArray[np.float64],
        trial_intercept: npt.NDArray[np.float64],
        counted_coef: Optional[npt.NDArray[np.float64]] = None,
        counted_intercept: Optional[npt.NDArray[np.float64]] = None,
        *,
        changes: bool = True,
    ) -> Dict[str, Any]: ...
    def gradient(
        self, coef: npt.NDArray[np.float64], intercept: npt.NDArray[np.float64]
    ) -> Dict[str, Any]: ...
    def hessian_product(
        self,
        coef: npt.NDArray[np.float64],
        intercept: npt.NDArray[np.float64],
        v: npt.NDArray[np.float64],
    ) -> npt.NDArray[np.float64]: ...

@final
class PolishPreconditioner:
    def __new__(cls, kss: npt.NDArray[np.float64]) -> PolishPreconditioner: ...
    @property
    def scale(self) -> float: ...
    @property
    def ridge(self) -> float: ...
    def rescale(self, a: float) -> bool: ...
    def solve(
        self,
        rhs: npt.NDArray[np.float64],
        intercepts: npt.NDArray[np.float64],
        rel_tols: npt.NDArray[np.float64],
        max_products: int,
        product: Callable[
            [npt.NDArray[np.float64], npt.NDArray[np.bool_]], npt.NDArray[np.float64]
        ],
    ) -> Tuple[npt.NDArray[np.float64], int]: ...

def kernel_rows(
    x: _Features, gamma: float, rows: npt.NDArray[np.int64]
) -> Tuple[npt.NDArray[np.float32], float]: ...
def decision_function(
    support_vectors: _Features,
    coef: npt.NDArray[np.float64],
    gamma: float,
    x: _Features,
    *,
    n_threads: Optional[int] = None,
    class_counts: Optional[npt.NDArray[np.int64]] = None,
    group_counts: Optional[npt.NDArray[np.int64]] = None,
    intercept: Optional[npt.NDArray[np.float64]] = None,
    kernel: str = "rbf",
    coef0: float = 0.0,
    degree: int = 3,
) -> npt.NDArray[np.float64]: ...
def decision_from_kernel(
    kernel_values: npt.NDArray[np.float64],
    coef: npt.NDArray[np.float64],
    *,
    n_threads: Optional[int] = None,
    class_counts: Optional[npt.NDArray[np.int64]] = None,
    intercept: Optional[npt.NDArray[np.float64]] = None,
) -> npt.NDArray[np.float64]: ...
def load_libsvm(path: str) -> _LibsvmRows: ...
def summarize_libsvm(path: str, chunk_rows: int) -> Dict[str, Any]: ...
def feature_variance(x: _Features) -> float: ...
def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
def requested_num_threads() -> int: ...
def simd_level() -> str: ...

@final
class BsgdStream:
    """A BSGD run fed in batches; pickles as its versioned byte form."""

    def __new__(
        cls,
        n_features: int,
        n_classes: int,
        *,
        n_samples: int,
        epochs: int = 1,
        sparse_input: bool = False,
        **options: Unpack[_StreamOptions],
    ) -> BsgdStream: ...
    def partial_fit(
        self,
        x: _Features,
        y: Union[npt.NDArray[np.uint32], npt.NDArray[np.float64]],
        callback: Optional[Callable[[Dict[str, Any]], Any]] = None,
        sample_weight: Optional[npt.NDArray[np.float64]] = None,
        average_placement: bool = True,
    ) -> None: ...
    def copy(self) -> BsgdStream: ...
    def result(self) -> Dict[str, Any]: ...
    @property
    def n_features(self) -> int: ...
    @property
    def n_classes(self) -> int: ...
    @property
    def steps(self) -> int: ...
    def to_bytes(self) -> bytes: ...
    @classmethod
    def from_bytes(cls, data: bytes) -> BsgdStream: ...
    def __reduce__(self) -> Tuple[Any, Tuple[bytes]]: ...

@final
class LibsvmChunkReader:
    """A LIBSVM file read in chunks of at most ``chunk_rows`` lines."""

    def __new__(cls, path: str, chunk_rows: int) -> LibsvmChunkReader: ...
    def __iter__(self) -> LibsvmChunkReader: ...
    def __next__(self) -> _LibsvmRows: ...
    @property
    def lines_read(self) -> int: ...
