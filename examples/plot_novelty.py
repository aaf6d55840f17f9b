"""
Novelty detection: the boundary of a one-class SVM
===================================================

:class:`~budgetsvm.KernelOneClassSVM` (the nu formulation, as scikit-learn's OneClassSVM) on
two clusters of normal observations. ``nu`` bounds the share of training rows left outside the
boundary from above and the share of support vectors from below; ``predict`` gives +1 inside,
-1 outside, and ``decision_function`` the signed distance (``score_samples`` minus ``offset_``).
New regular observations mostly fall inside, uniform outliers mostly outside.
"""

import matplotlib.pyplot as plt
import numpy as np
from budgetsvm import KernelOneClassSVM

rng = np.random.default_rng(0)
centres = np.array([[-2.0, -2.0], [2.0, 2.0]])
X = np.vstack([c + 0.6 * rng.normal(size=(500, 2)) for c in centres])
X_new = np.vstack([c + 0.6 * rng.normal(size=(50, 2)) for c in centres])
X_out = rng.uniform(-5, 5, size=(40, 2))

clf = KernelOneClassSVM(nu=0.05, gamma=0.5).fit(X)
outside_train = np.mean(clf.predict(X) == -1)
inside_new = np.mean(clf.predict(X_new) == 1)
outside_out = np.mean(clf.predict(X_out) == -1)

xx, yy = np.meshgrid(np.linspace(-5, 5, 300), np.linspace(-5, 5, 300))
z = clf.decision_function(np.c_[xx.ravel(), yy.ravel()]).reshape(xx.shape)
fig, ax = plt.subplots(figsize=(6, 6))
ax.contourf(xx, yy, z, levels=np.linspace(z.min(), 0, 7), cmap="Blues_r")
ax.contour(xx, yy, z, levels=[0], colors="C3", linewidths=2)
ax.scatter(X[:, 0], X[:, 1], s=6, c="white", edgecolors="k", linewidths=0.3, label="training")
ax.scatter(X_new[:, 0], X_new[:, 1], s=18, c="C2", edgecolors="k", label="new regular")
ax.scatter(X_out[:, 0], X_out[:, 1], s=18, c="gold", edgecolors="k", label="new abnormal")
ax.set_title(
    f"nu = 0.05: {100 * outside_train:.1f}% of training rows outside, "
    f"{len(clf.support_)} SVs\nnew regular inside {100 * inside_new:.0f}%, "
    f"abnormal outside {100 * outside_out:.0f}%",
    fontsize=9,
)
ax.legend(loc="upper left", fontsize=8)
plt.show()
