"""
Decision boundary and support vectors
=====================================

A 2-D problem (two interleaved half-moons with noise) learned by :class:`budgetsvm.BudgetSVC`
with a budget of 25 support vectors, next to the exact SVM (:class:`budgetsvm.KernelSVC`),
which needs many more. The budgeted model's support vectors are not training points: merging
replaces two of them by one point on the segment between them.
"""

import matplotlib.pyplot as plt
import numpy as np
from budgetsvm import BudgetSVC, KernelSVC
from sklearn.datasets import make_moons

X, y = make_moons(n_samples=3000, noise=0.25, random_state=0)
X_test, y_test = make_moons(n_samples=2000, noise=0.25, random_state=1)
models = {
    "BudgetSVC, budget = 25": BudgetSVC(C=10, gamma=2.0, budget=25, epochs=10, random_state=0),
    "KernelSVC (exact)": KernelSVC(C=10, gamma=2.0),
}
xx, yy = np.meshgrid(np.linspace(-2, 3, 300), np.linspace(-1.5, 2, 220))
grid = np.column_stack([xx.ravel(), yy.ravel()])

fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
for ax, (name, clf) in zip(axes, models.items()):
    clf.fit(X, y)
    f = clf.decision_function(grid).reshape(xx.shape)
    ax.contourf(xx, yy, f, levels=[-1e9, 0, 1e9], colors=["#cfe0f3", "#f6d5c8"], alpha=0.8)
    ax.contour(xx, yy, f, levels=[-1, 0, 1], colors="k", linestyles=["--", "-", "--"])
    ax.scatter(X[:400, 0], X[:400, 1], c=y[:400], cmap="coolwarm", s=6, alpha=0.5)
    sv = clf.support_vectors_
    ax.scatter(sv[:, 0], sv[:, 1], s=40, facecolors="none", edgecolors="k", linewidths=1.2)
    ax.set_title(f"{name}: {sv.shape[0]} SVs, test accuracy {clf.score(X_test, y_test):.3f}")
axes[0].set_ylabel("x2")
for ax in axes:
    ax.set_xlabel("x1")
fig.tight_layout()
plt.show()
