"""budgetsvm: Gaussian-kernel SVMs on a budget of support vectors, with a Rust engine.

The names below load on first use (PEP 562), so that ``import budgetsvm`` and the command
line's ``--help``, ``predict`` and ``evaluate`` do not pay for importing scikit-learn, which
only the estimators need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from budgetsvm._budgetsvm import __version__, get_num_threads, set_num_threads, simd_level
    from budgetsvm.budget_cv import BudgetSVCCV, BudgetSVRCV
    from budgetsvm.budget_svc import BudgetSVC
    from budgetsvm.budget_svr import BudgetSVR
    from budgetsvm.kernel_cv import KernelNuSVCCV, KernelNuSVRCV, KernelSVCCV, KernelSVRCV
    from budgetsvm.kernel_nu_svc import KernelNuSVC
    from budgetsvm.kernel_nu_svr import KernelNuSVR
    from budgetsvm.kernel_one_class import KernelOneClassSVM
    from budgetsvm.kernel_svc import KernelSVC
    from budgetsvm.kernel_svr import KernelSVR
    from budgetsvm.modelfile import ModelFormatError, load_model, save_model

_WHERE = {
    "BudgetSVC": "budgetsvm.budget_svc",
    "BudgetSVCCV": "budgetsvm.budget_cv",
    "BudgetSVR": "budgetsvm.budget_svr",
    "BudgetSVRCV": "budgetsvm.budget_cv",
    "KernelNuSVC": "budgetsvm.kernel_nu_svc",
    "KernelNuSVCCV": "budgetsvm.kernel_cv",
    "KernelNuSVR": "budgetsvm.kernel_nu_svr",
    "KernelNuSVRCV": "budgetsvm.kernel_cv",
    "KernelOneClassSVM": "budgetsvm.kernel_one_class",
    "KernelSVC": "budgetsvm.kernel_svc",
    "KernelSVCCV": "budgetsvm.kernel_cv",
    "KernelSVR": "budgetsvm.kernel_svr",
    "KernelSVRCV": "budgetsvm.kernel_cv",
    "ModelFormatError": "budgetsvm.modelfile",
    "load_model": "budgetsvm.modelfile",
    "save_model": "budgetsvm.modelfile",
    "__version__": "budgetsvm._budgetsvm",
    "get_num_threads": "budgetsvm._budgetsvm",
    "set_num_threads": "budgetsvm._budgetsvm",
    "simd_level": "budgetsvm._budgetsvm",
}

__all__ = [
    "BudgetSVC",
    "BudgetSVCCV",
    "BudgetSVR",
    "BudgetSVRCV",
    "KernelNuSVC",
    "KernelNuSVCCV",
    "KernelNuSVR",
    "KernelNuSVRCV",
    "KernelOneClassSVM",
    "KernelSVC",
    "KernelSVCCV",
    "KernelSVR",
    "KernelSVRCV",
    "ModelFormatError",
    "__version__",
    "get_num_threads",
    "load_model",
    "save_model",
    "set_num_threads",
    "simd_level",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'budgetsvm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
