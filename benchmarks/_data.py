"""Benchmark data sets from ../shared/data with the settings of ../shared/data/SETTINGS.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import scipy.sparse as sp
from budgetsvm.datasets import load_svmlight_file

SHARED = Path(os.environ.get("BUDGETSVM_SHARED", Path(__file__).resolve().parents[2] / "shared"))
DATA = SHARED / "data"

# name: (train file, test file or None for the 80/20 split with seed 0, scale to [-1, 1], C, gamma,
#        paper 000 / 002 reference figures)
SETTINGS: Dict[str, dict] = {
    "a9a": dict(
        train="a9a/a9a.xz",
        test="a9a/a9a.t.xz",
        scale=False,
        C=2.0**5,
        gamma=2.0**-7,
        paper_name="ADULT",
        libsvm=84.82,
        paper_b100=(84.20, 0.80),
        paper_b500=(83.95, 1.00),
        paper_merge_freq=32.0,
        paper_time_saved=18.0,
    ),
    "ijcnn1": dict(
        train="ijcnn1/ijcnn1.bz2",
        test="ijcnn1/ijcnn1.t.bz2",
        scale=False,
        C=2.0**5,
        gamma=2.0**1,
        paper_name="IJCNN",
        libsvm=98.77,
        paper_b100=(97.13, 0.36),
        paper_b500=(98.07, 0.37),
        paper_merge_freq=17.0,
        paper_time_saved=30.0,
    ),
    "phishing": dict(
        train="phishing/phishing.xz",
        test=None,
        scale=False,
        C=2.0**3,
        gamma=2.0**3,
        paper_name="PHISHING",
        libsvm=97.55,
        paper_b100=(96.39, 0.37),
        paper_b500=(97.53, 0.20),
        paper_merge_freq=21.0,
        paper_time_saved=14.0,
    ),
    "w8a": dict(
        train="w8a/w8a.xz",
        test=None,
        scale=False,
        C=2.0**3,
        gamma=2.0**-5,
        paper_name="WEB",
        libsvm=98.81,
        paper_b100=(98.79, 0.04),
        paper_b500=(98.81, 0.02),
        paper_merge_freq=6.0,
        paper_time_saved=6.0,
    ),
    "cod-rna": dict(
        train="cod-rna/cod-rna.xz",
        test=None,
        scale=True,
        C=2.0**5,
        gamma=2.0**-3,
        paper_name="COD-RNA",
        libsvm=96.33,
    ),
    # Multi-class sets of paper 001, for which SETTINGS.md says "cross-validate": 3-fold CV of
    # KernelSVC on 8,000 training rows over C in {1, 10, 100, 1000}, gamma in {0.5, 2, 8, 32};
    # pendigits' best (99.73%) is C = 10, gamma = 2; on shuttle every C >= 10 with gamma 2-8 lies
    # within 0.1 point (99.60-99.74%), so the smaller C of the best two, C = 100, gamma = 8.
    "pendigits": dict(
        train="pendigits/pendigits.scale.xz",
        test="pendigits/pendigits.scale.t.xz",
        scale=False,
        C=10.0,
        gamma=2.0,
        paper_name="PENDIGITS",
        libsvm=98.23,
    ),
    "shuttle": dict(
        train="shuttle/shuttle.xz",
        test="shuttle/shuttle.t.xz",
        scale=True,
        C=100.0,
        gamma=8.0,
        paper_name="SHUTTLE",
        libsvm=99.90,
    ),
}


def _scale(X_train: sp.csr_matrix, X_test: sp.csr_matrix) -> Tuple[np.ndarray, np.ndarray]:
    """svm-scale to [-1, 1] with the training ranges (dense: these sets are low-dimensional)."""
    A, T = X_train.toarray(), X_test.toarray()
    lo, hi = A.min(axis=0), A.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return 2 * (A - lo) / span - 1, np.clip(2 * (T - lo) / span - 1, -1, 1)


def load(name: str):
    """X_train, y_train, X_test, y_test for a data set, split and scaled as SETTINGS.md says."""
    s = SETTINGS[name]
    X, y = load_svmlight_file(DATA / s["train"])
    if s["test"] is not None:
        Xt, yt = load_svmlight_file(DATA / s["test"], n_features=None)
        width = max(X.shape[1], Xt.shape[1])
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], width))
        Xt = sp.csr_matrix((Xt.data, Xt.indices, Xt.indptr), shape=(Xt.shape[0], width))
    else:
        perm = np.random.default_rng(0).permutation(X.shape[0])
        cut = int(0.8 * X.shape[0])
        X, Xt, y, yt = X[perm[:cut]], X[perm[cut:]], y[perm[:cut]], y[perm[cut:]]
    if s["scale"]:
        X, Xt = _scale(X, Xt)
    return X, y, Xt, yt
