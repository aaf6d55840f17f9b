"""Hostile-user cases: forked children keep working, thread counts are checked, Ctrl-C reaches
every long computation whichever thread runs it and leaves the estimator usable."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading

import numpy as np
import pytest
from budgetsvm import BudgetSVC, KernelSVC, get_num_threads, set_num_threads
from conftest import xor_data
from numpy.testing import assert_array_equal

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="fork and SIGINT are POSIX")

# What the forked child works on: set before the fork, inherited without pickling.
_STATE: dict = {}


def _child(queue) -> None:  # pragma: no cover - runs in the forked child
    try:
        X, y = _STATE["X"], _STATE["y"]
        out = {name: clf.predict(X) for name, clf in _STATE["models"].items()}
        out["refit"] = BudgetSVC(budget=20, epochs=1, random_state=0).fit(X, y).predict(X)
        out["kernel_refit"] = KernelSVC(C=1.0, gamma=1.0).fit(X[:300], y[:300]).predict(X)
        queue.put(out)
    except BaseException as e:
        queue.put(repr(e))


@posix_only
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads, Python >= 3.12
@pytest.mark.parametrize("threads_first", [False, True])
def test_forked_child_can_predict_and_fit(threads_first):
    X, y = xor_data(600, 1)
    if threads_first:
        set_num_threads(2)
    models = {
        "bsgd": BudgetSVC(budget=20, epochs=2, random_state=0).fit(X, y),
        "bsca": BudgetSVC(budget=20, epochs=2, solver="bsca", random_state=0).fit(X, y),
        "kernel": KernelSVC(C=1.0, gamma=1.0).fit(X, y),
    }
    _STATE.update(X=X, y=y, models=models)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    try:
        out = queue.get(timeout=120)
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    set_num_threads(0)
    assert isinstance(out, dict), out
    for name, clf in models.items():
        assert_array_equal(out[name], clf.predict(X))
    assert out["refit"].shape == (600,)
    assert out["kernel_refit"].shape == (600,)


def test_thread_counts_are_validated():
    before = get_num_threads()
    with pytest.raises(ValueError, match="threads"):
        set_num_threads(10**6)
    assert get_num_threads() == before
    X, y = xor_data(100, 2)
    with pytest.raises(ValueError, match="n_jobs"):
        KernelSVC(n_jobs=10_000).fit(X, y)


def _interrupt_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


LONG_FITS = {
    # Each would take minutes; the interrupt comes after half a second.
    "bsgd-binary": lambda: BudgetSVC(budget=200, epochs=10_000, random_state=0),
    "bsca-binary": lambda: BudgetSVC(budget=200, epochs=10_000, solver="bsca", random_state=0),
    "bsca-multiclass": lambda: BudgetSVC(budget=200, epochs=10_000, solver="bsca", random_state=0),
    "smo": lambda: KernelSVC(C=1e4, gamma=50.0, tol=1e-12, solver="smo", max_iter=10**12),
    "alfpgm": lambda: KernelSVC(C=1e4, gamma=50.0, tol=1e-12, max_iter=10**12),
}


@posix_only
@pytest.mark.parametrize("case", sorted(LONG_FITS))
def test_ctrl_c_stops_a_fit_on_any_thread_and_the_estimator_refits(case):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(8000, 8))
    y = (np.sin(8 * X[:, 0]) + X[:, 1] > 0).astype(int)
    if case == "bsca-multiclass":
        y = y + (X[:, 2] > 0.3)
    clf = LONG_FITS[case]()
    timer = _interrupt_after(0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            clf.fit(X, y)
    finally:
        timer.cancel()
    # Usable afterwards: a short fit of the same estimator works.
    if isinstance(clf, BudgetSVC):
        clf.set_params(epochs=1)
    else:
        clf.set_params(tol=1e-2, C=1.0, gamma=1.0, max_iter=-1)
    clf.fit(X[:500], y[:500])
    assert clf.predict(X[:10]).shape == (10,)


@posix_only
def test_ctrl_c_stops_predict_on_a_large_matrix():
    X, y = xor_data(2000, 3)
    clf = BudgetSVC(budget=500, epochs=1, random_state=0, C=100.0, gamma=20.0).fit(X, y)
    big = np.random.default_rng(1).uniform(-1, 1, size=(10_000_000, 2))
    timer = _interrupt_after(0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            clf.decision_function(big)
    finally:
        timer.cancel()
    assert_array_equal(clf.predict(X[:100]), clf.predict(X[:100]))
