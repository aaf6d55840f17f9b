"""budgetsvm: Gaussian-kernel SVMs on a budget of support vectors, with a Rust engine."""

from budgetsvm._budgetsvm import __version__, get_num_threads, set_num_threads, simd_level
from budgetsvm.kernel_svc import KernelSVC
from budgetsvm.svm import BudgetSVC

__all__ = [
    "BudgetSVC",
    "KernelSVC",
    "__version__",
    "get_num_threads",
    "set_num_threads",
    "simd_level",
]
