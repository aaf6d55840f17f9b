"""
Choosing C and gamma: KernelSVCCV against GridSearchCV
======================================================

The heat map scikit-learn's ``plot_rbf_parameters`` draws (cross-validated accuracy over a
grid of C and gamma), made by :class:`~budgetsvm.KernelSVCCV` on 8,000 rows of a9a (UCI Adult,
embedded in the package), next to the same grid searched by scikit-learn's ``GridSearchCV``
around :class:`~budgetsvm.KernelSVC`. Both see the same folds and give the same scores;
KernelSVCCV solves the Cs of each fold and gamma along one path, each C started from the last
one's solution, instead of one cold fit per point. On larger data its default search
(``search='auto'``) also halves the points on growing subsamples first, and
:class:`~budgetsvm.BudgetSVCCV` does the same for the budgeted model, its budget included.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from budgetsvm import KernelSVC, KernelSVCCV
from budgetsvm.datasets import load_default
from sklearn.model_selection import GridSearchCV, StratifiedKFold

X, y, X_test, y_test = load_default()
rows = np.random.default_rng(0).permutation(X.shape[0])[:8000]
X, y = X[rows], y[rows]
Cs = [0.25, 1.0, 4.0, 16.0, 64.0]
gammas = [2.0**-9, 2.0**-7, 2.0**-5, 2.0**-3]
folds = StratifiedKFold(3, shuffle=True, random_state=0)

start = time.perf_counter()
search = KernelSVCCV(Cs=Cs, gammas=gammas, cv=folds, search="grid").fit(X, y)
ours = time.perf_counter() - start
start = time.perf_counter()
grid = GridSearchCV(KernelSVC(), {"C": Cs, "gamma": gammas}, cv=folds).fit(X, y)
theirs = time.perf_counter() - start

# cv_results_ lists the points C-major (parameter names sorted, the last varying fastest).
scores = 100 * search.cv_results_["mean_test_score"].reshape(len(Cs), len(gammas))
reference = 100 * grid.cv_results_["mean_test_score"].reshape(len(Cs), len(gammas))
print(f"largest difference to GridSearchCV's scores: {np.abs(scores - reference).max():.3f} points")
print(f"best: {search.best_params_}, test accuracy {100 * search.score(X_test, y_test):.2f}%")

fig, ax = plt.subplots(figsize=(6, 4.5))
image = ax.imshow(scores, cmap="viridis", origin="lower", vmin=scores.max() - 3)
ax.set_xticks(range(len(gammas)), [f"2^{int(np.log2(g))}" for g in gammas])
ax.set_yticks(range(len(Cs)), [f"{c:g}" for c in Cs])
ax.set(xlabel="gamma", ylabel="C")
for i in range(len(Cs)):
    for j in range(len(gammas)):
        light = scores[i, j] > scores.max() - 1.5
        ax.text(j, i, f"{scores[i, j]:.1f}", ha="center", va="center", color="k" if light else "w")
fig.colorbar(image, label="3-fold CV accuracy (%)")
ax.set_title(f"KernelSVCCV {ours:.1f} s, GridSearchCV {theirs:.1f} s ({ours / theirs:.2f}x)")
fig.tight_layout()
plt.show()
