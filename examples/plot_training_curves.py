"""
Training curves
===============

Per-epoch traces recorded with ``record_history=True``: the primal objective of the budgeted
model (and BSCA's dual), test accuracy on an ``eval_set`` and the fraction of steps that
merged support vectors, for BSGD and BSCA on a9a with a budget of 100 (paper 002, figures
1-3), drawn by :func:`budgetsvm.plotting.plot_histories`.
"""

import matplotlib.pyplot as plt
from budgetsvm import BudgetSVC
from budgetsvm.datasets import load_default
from budgetsvm.plotting import plot_histories

X, y, X_test, y_test = load_default()
histories = {}
for solver in ("bsgd", "bsca"):
    clf = BudgetSVC(
        C=32, gamma=2**-7, budget=100, epochs=8, solver=solver, random_state=0,
        record_history=True,
    )
    clf.fit(X, y, eval_set=(X_test, y_test))
    histories[f"{solver.upper()}, B = 100"] = clf.history_
fig = plot_histories(histories, against="epoch", title="a9a, C = 2^5, gamma = 2^-7")
plt.show()
