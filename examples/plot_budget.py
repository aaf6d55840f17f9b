"""
Accuracy and training time against the budget
==============================================

On a9a (UCI Adult, embedded in the package: 32,561 training and 16,281 test rows), test
accuracy and training time of BSGD and BSCA as the budget grows, with the papers' C = 2^5 and
gamma = 2^-7. The dashed line is the exact SVM (LIBSVM, 84.82%): a hundred support vectors
get within about a point of it, and time grows linearly with the budget.
"""

import time

import matplotlib.pyplot as plt
from budgetsvm import BudgetSVC
from budgetsvm.datasets import load_default

X, y, X_test, y_test = load_default()
budgets = [10, 30, 100, 300]
fig, (ax_acc, ax_time) = plt.subplots(1, 2, figsize=(10, 4))
for solver, marker in (("bsgd", "o"), ("bsca", "s")):
    accuracy, seconds = [], []
    for budget in budgets:
        clf = BudgetSVC(C=32, gamma=2**-7, budget=budget, epochs=5, solver=solver, random_state=0)
        start = time.perf_counter()
        clf.fit(X, y)
        seconds.append(time.perf_counter() - start)
        accuracy.append(100 * clf.score(X_test, y_test))
    ax_acc.plot(budgets, accuracy, marker=marker, label=solver.upper())
    ax_time.plot(budgets, seconds, marker=marker, label=solver.upper())
ax_acc.axhline(84.82, color="k", linestyle="--", label="exact SVM (LIBSVM)")
ax_acc.set(xscale="log", xlabel="budget (support vectors)", ylabel="test accuracy (%)")
ax_time.set(xscale="log", xlabel="budget (support vectors)", ylabel="training seconds")
ax_acc.legend()
ax_time.legend()
fig.tight_layout()
plt.show()
