"""Per-epoch traces of a budgeted fit (the curves of paper 002, figures 1-3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from budgetsvm import _budgetsvm

# The exact dual objective costs O(n^2) kernel values per epoch; above this many rows it is
# reported as NaN (not computed).
DUAL_MAX_ROWS = 10_000
_BLOCK = 2048


@dataclass(eq=False)
class HistoryRecorder:
    """Epoch observer for the native solvers: records objectives, accuracy, merge fraction, time.

    The primal objective is the C-form 1/2 |w|^2 + C sum_i loss_i of the budgeted model (binary
    hinge; for several classes the sum over one-vs-rest problems for BSCA and the Crammer-Singer
    loss for BSGD), with |w|^2 = beta^T K beta over the support vectors. The dual objective
    sum(alpha) - 1/2 alpha^T Q alpha (BSCA only) is exact, and NaN above ``dual_max_rows`` rows.
    """

    #: The training rows, as the engine takes them.
    X: Any
    #: Their class indices.
    y: np.ndarray
    n_classes: int
    C: float
    gamma: float
    solver: str
    #: (rows as the engine takes them, class indices; n_classes for a label never trained on).
    eval_set: Optional[tuple] = None
    #: None: the module's ``DUAL_MAX_ROWS`` when the recorder is made (tests lower it).
    dual_max_rows: Optional[int] = None
    weights: Optional[np.ndarray] = None
    n_threads: Optional[int] = None
    history: Dict[str, List[float]] = field(init=False)

    def __post_init__(self) -> None:
        if self.dual_max_rows is None:
            self.dual_max_rows = DUAL_MAX_ROWS
        self.history = {
            "epoch": [],
            "seconds": [],
            "primal": [],
            "dual": [],
            "train_accuracy": [],
            "val_accuracy": [],
            "maintenance_fraction": [],
            "n_sv": [],
            "mean_sv_nnz": [],
        }

    def __call__(self, info: Dict[str, Any]) -> None:
        sv, coef = info["support_vectors"], info["coef"]
        f = _budgetsvm.decision_function(sv, coef, self.gamma, self.X, n_threads=self.n_threads)
        n_sv = coef.shape[0]
        k_sv = _budgetsvm.rbf_kernel(sv, sv, self.gamma, n_threads=self.n_threads) if n_sv else np.zeros((0, 0))
        norms = np.einsum("jk,jl,lk->k", coef, k_sv, coef) if n_sv else np.zeros(coef.shape[1])
        h = self.history
        h["epoch"].append(info["epoch"])
        h["seconds"].append(info["seconds"])
        h["primal"].append(self._primal(f, norms))
        h["dual"].append(self._dual(info["alphas"], info["labels"]))
        h["train_accuracy"].append(float(np.mean(_predict_index(f) == self.y)))
        if self.eval_set is not None:
            Xv, yv = self.eval_set
            fv = _budgetsvm.decision_function(sv, coef, self.gamma, Xv, n_threads=self.n_threads)
            h["val_accuracy"].append(float(np.mean(_predict_index(fv) == yv)))
        else:
            h["val_accuracy"].append(float("nan"))
        h["maintenance_fraction"].append(info["maintenance_fraction"])
        h["n_sv"].append(n_sv)
        # Stored entries per SV: merged sparse vectors grow denser over a run.
        stored = len(sv[0]) if isinstance(sv, tuple) else np.count_nonzero(sv)
        h["mean_sv_nnz"].append(stored / n_sv if n_sv else 0.0)

    def _primal(self, f: np.ndarray, norms: np.ndarray) -> float:
        if f.shape[1] == 1:
            ypm = np.where(self.y == 1, 1.0, -1.0)
            loss = np.maximum(0.0, 1.0 - ypm * f[:, 0])
        elif self.solver == "bsca":
            ypm = np.where(self.y[:, None] == np.arange(f.shape[1])[None, :], 1.0, -1.0)
            loss = np.maximum(0.0, 1.0 - ypm * f).sum(axis=1)
        else:
            rows = np.arange(len(self.y))
            true = f[rows, self.y]
            others = f.copy()
            others[rows, self.y] = -np.inf
            loss = np.maximum(0.0, 1.0 + others.max(axis=1) - true)
        # Weighted rows: C_i = C w_i.
        total = loss.sum() if self.weights is None else loss @ self.weights
        return float(0.5 * norms.sum() + self.C * total)

    def _dual(self, alphas: List[np.ndarray], labels: List[np.ndarray]) -> float:
        if not alphas or len(self.y) > self.dual_max_rows:
            return float("nan")
        total = 0.0
        for alpha, ypm in zip(alphas, labels):
            v = alpha * ypm
            kv = np.empty_like(v)
            for start in range(0, len(v), _BLOCK):
                stop = min(start + _BLOCK, len(v))
                block = _slice_rows(self.X, start, stop)
                kv[start:stop] = _budgetsvm.rbf_kernel(block, self.X, self.gamma, n_threads=self.n_threads) @ v
            total += float(alpha.sum() - 0.5 * v @ kv)
        return total


def _predict_index(f: np.ndarray) -> np.ndarray:
    if f.shape[1] == 1:
        return (f[:, 0] > 0).astype(np.intp)
    return np.argmax(f, axis=1)


def _slice_rows(native: Any, start: int, stop: int) -> Any:
    if isinstance(native, tuple):
        data, indices, indptr, n_cols = native
        lo, hi = indptr[start], indptr[stop]
        return (
            np.ascontiguousarray(data[lo:hi]),
            np.ascontiguousarray(indices[lo:hi]),
            np.ascontiguousarray(indptr[start : stop + 1] - lo),
            n_cols,
        )
    return native[start:stop]
