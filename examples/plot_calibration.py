"""
Probability calibration
=======================

``probability=True`` fits Platt sigmoids on decision values from an internal 5-fold
cross-validation, as SVC does. The reliability diagram compares the predicted probability of
the positive class with the observed frequency on held-out rows, for the budgeted model, the
exact one, and a sigmoid fitted by :class:`sklearn.calibration.CalibratedClassifierCV` on top of
the budgeted model.
"""

import matplotlib.pyplot as plt
from budgetsvm import BudgetSVC, KernelSVC
from sklearn.calibration import CalibratedClassifierCV, CalibrationDisplay
from sklearn.datasets import make_classification

X, y = make_classification(
    n_samples=8000, n_features=10, n_informative=5, flip_y=0.05, class_sep=0.8, random_state=0
)
X_train, y_train, X_test, y_test = X[:4000], y[:4000], X[4000:], y[4000:]
models = {
    "BudgetSVC(probability=True)": BudgetSVC(
        C=1, gamma=0.1, budget=100, probability=True, random_state=0
    ),
    "KernelSVC(probability=True)": KernelSVC(C=1, gamma=0.1, probability=True, random_state=0),
    "CalibratedClassifierCV(BudgetSVC)": CalibratedClassifierCV(
        BudgetSVC(C=1, gamma=0.1, budget=100, random_state=0), cv=5
    ),
}
fig, ax = plt.subplots(figsize=(6, 5))
for name, clf in models.items():
    clf.fit(X_train, y_train)
    CalibrationDisplay.from_estimator(clf, X_test, y_test, n_bins=10, name=name, ax=ax)
ax.set_title("Reliability on 4,000 held-out rows")
fig.tight_layout()
plt.show()
