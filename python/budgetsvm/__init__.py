"""budgetsvm: Gaussian-kernel SVMs on a budget of support vectors, with a Rust engine."""

from budgetsvm._budgetsvm import __version__, get_num_threads, set_num_threads, simd_level
from budgetsvm.kernel_svc import KernelSVC
from budgetsvm.modelfile import ModelFormatError, load_model, save_model
from budgetsvm.svm import BudgetSVC

__all__ = [
    "BudgetSVC",
    "KernelSVC",
    "ModelFormatError",
    "__version__",
    "get_num_threads",
    "load_model",
    "save_model",
    "set_num_threads",
    "simd_level",
]
