"""Class weights on imbalanced data and the cost and quality of probability=True, against
scikit-learn's SVC, in one run.

1. Imbalanced data: ijcnn1 (about 10% positive) and w8a (about 3% positive), C and gamma from
   ../shared/data/SETTINGS.md. Balanced accuracy (the mean of the per-class recalls), accuracy
   and fit seconds of BudgetSVC (BSGD and BSCA, B = 500), KernelSVC and SVC, each without and
   with class_weight='balanced'.
2. probability=True on ijcnn1: fit seconds without and with it (the internal 5-fold
   cross-validation), test log loss and Brier score, and the mean |p - p_SVC| against SVC's
   probabilities.

    python benchmarks/weights_probability.py --out docs/weights_probability.md
"""

from __future__ import annotations

import argparse
import datetime
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np
from _data import SETTINGS, load
from _report import commit, machine, publish
from budgetsvm import BudgetSVC, KernelSVC
from sklearn.metrics import accuracy_score, balanced_accuracy_score, brier_score_loss, log_loss
from sklearn.svm import SVC

warnings.filterwarnings("ignore", category=FutureWarning)  # SVC(probability=True), sklearn 1.9


def makers(name: str, budget: int) -> Dict[str, Callable[..., Any]]:
    C, gamma = SETTINGS[name]["C"], SETTINGS[name]["gamma"]
    return {
        f"BudgetSVC bsgd B={budget}": lambda **kw: BudgetSVC(
            C=C, gamma=gamma, budget=budget, epochs=5, random_state=0, **kw
        ),
        f"BudgetSVC bsca B={budget}": lambda **kw: BudgetSVC(
            C=C, gamma=gamma, budget=budget, epochs=5, solver="bsca", random_state=0, **kw
        ),
        "KernelSVC (exact)": lambda **kw: KernelSVC(C=C, gamma=gamma, random_state=0, **kw),
        "scikit-learn SVC": lambda **kw: SVC(C=C, gamma=gamma, random_state=0, **kw),
    }


def timed_fit(est: Any, X: Any, y: Any) -> float:
    t0 = time.perf_counter()
    est.fit(X, y)
    return time.perf_counter() - t0


def imbalanced(names: List[str], budget: int) -> List[str]:
    lines = [
        "## Class weights on imbalanced data",
        "",
        "| data | positives | method | class_weight | fit s | accuracy | balanced accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in names:
        X, y, Xt, yt = load(name)
        positive = np.mean(y == y.max())
        for method, make in makers(name, budget).items():
            for cw in (None, "balanced"):
                est = make(class_weight=cw)
                seconds = timed_fit(est, X, y)
                pred = est.predict(Xt)
                row = (
                    f"| {name} | {positive:.1%} | {method} | {cw} | {seconds:.2f} | "
                    f"{accuracy_score(yt, pred):.2%} | {balanced_accuracy_score(yt, pred):.2%} |"
                )
                print(row, flush=True)
                lines.append(row)
    return lines


def probability(name: str, budget: int) -> List[str]:
    X, y, Xt, yt = load(name)
    lines = [
        "",
        f"## probability=True on {name}",
        "",
        "Fit seconds without and with the internal 5-fold cross-validation, test log loss and",
        "Brier score (of the positive class), and the mean absolute difference of the",
        "probabilities from SVC's.",
        "",
        "| method | fit s | fit s, probability=True | ratio | log loss | Brier | mean abs diff to SVC |",
        "|---|---|---|---|---|---|---|",
    ]
    results = {}
    for method, make in makers(name, budget).items():
        plain = timed_fit(make(), X, y)
        est = make(probability=True)
        with_proba = timed_fit(est, X, y)
        proba = est.predict_proba(Xt)
        results[method] = (plain, with_proba, proba, est.classes_)
    ref = results["scikit-learn SVC"][2]
    for method, (plain, with_proba, proba, classes) in results.items():
        row = (
            f"| {method} | {plain:.2f} | {with_proba:.2f} | {with_proba / plain:.1f} | "
            f"{log_loss(yt, proba, labels=classes):.4f} | "
            f"{brier_score_loss(yt == classes[1], proba[:, 1]):.4f} | "
            f"{np.abs(proba - ref).mean():.4f} |"
        )
        print(row, flush=True)
        lines.append(row)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--budget", type=int, default=500)
    parser.add_argument("--datasets", nargs="+", default=["ijcnn1", "w8a"])
    parser.add_argument("--probability-dataset", default="ijcnn1")
    args = parser.parse_args()
    t0 = time.perf_counter()
    body = imbalanced(args.datasets, args.budget)
    body += probability(args.probability_dataset, args.budget)
    head = [
        "# Class weights and probabilities: budgetsvm against scikit-learn's SVC",
        "",
        f"`python benchmarks/weights_probability.py --out docs/weights_probability.md`, "
        f"{datetime.date.today()}, commit {commit()}, {machine()}; one run each "
        f"({time.perf_counter() - t0:.0f} s in all). C and gamma from ../shared/data/SETTINGS.md, "
        "epochs = 5 for the budgeted solvers, tol = 1e-3 for the exact ones.",
        "",
    ]
    publish(head + body, args.out)


if __name__ == "__main__":
    main()
