"""The module ``BudgetSVC`` was defined in before it moved to ``budgetsvm.budget_svc``.

Kept so that code importing ``budgetsvm.svm`` and pickles of estimators made before the move
(pickle names a class by its module: ``budgetsvm.svm.BudgetSVC``) still load.
"""

from __future__ import annotations

from budgetsvm.budget_svc import DUAL_STEPS, MAINTENANCE, MERGE_SEARCHES, SOLVERS, BudgetSVC

__all__ = ["BudgetSVC", "DUAL_STEPS", "MAINTENANCE", "MERGE_SEARCHES", "SOLVERS"]
