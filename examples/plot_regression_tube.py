"""
Regression on a budget: the fitted curve and its epsilon tube
==============================================================

Twenty thousand noisy samples of a curve, fitted by :class:`~budgetsvm.BudgetSVR` with 25
support vectors (BSCA, merging, then the polish) and by the exact :class:`~budgetsvm.KernelSVR`
with every support vector it needs. Errors inside the tube (``abs(f(x) - y) <= epsilon``) cost
nothing. The budgeted model's support vectors are drawn at their merged positions, at the
height of the curve there: a few dozen carry the whole function.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from budgetsvm import BudgetSVR, KernelSVR

rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, size=(20_000, 1))
y = np.sin(2 * X[:, 0]) * np.exp(-0.1 * X[:, 0] ** 2) + 0.15 * rng.normal(size=len(X))
grid = np.linspace(-3, 3, 600)[:, None]
truth = np.sin(2 * grid[:, 0]) * np.exp(-0.1 * grid[:, 0] ** 2)
epsilon = 0.2

fits = {}
for name, model in [
    ("BudgetSVR, budget 25", BudgetSVR(C=1.0, gamma=2.0, epsilon=epsilon, budget=25, random_state=0)),
    ("KernelSVR (exact)", KernelSVR(C=1.0, gamma=2.0, epsilon=epsilon)),
]:
    start = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - start
    n_sv = model.support_vectors_.shape[0]
    fits[name] = (model, f"{name}: {n_sv} SVs, {seconds:.2f} s, R^2 {model.score(X, y):.3f}")

fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, (model, title) in zip(axes, fits.values()):
    f = model.predict(grid)
    ax.scatter(X[:2000, 0], y[:2000], s=2, color="0.75", label="samples (2,000 of 20,000)")
    ax.plot(grid[:, 0], truth, "k--", lw=1, label="noise-free curve")
    ax.plot(grid[:, 0], f, color="C0", lw=2, label="fit")
    ax.fill_between(grid[:, 0], f - epsilon, f + epsilon, color="C0", alpha=0.2, label="epsilon tube")
    if model.support_vectors_.shape[0] <= 100:
        sv = np.asarray(model.support_vectors_)[:, 0]
        ax.plot(sv, model.predict(sv[:, None]), "o", color="C3", ms=5, label="support vectors")
    ax.set(title=title, xlabel="x")
    ax.title.set_fontsize(9)
axes[0].set_ylabel("y")
axes[0].legend(loc="lower left", fontsize=8)
fig.tight_layout()
plt.show()
