"""A forked child (multiprocessing's fork, GridSearchCV(n_jobs > 1) on POSIX) keeps working:
it predicts with its parent's models and fits new ones, whether the parent's thread pool ran
before the fork or not."""

from __future__ import annotations

import multiprocessing
import sys

import pytest
from budgetsvm import BudgetSVC, KernelSVC, set_num_threads
from conftest import xor_data
from numpy.testing import assert_array_equal

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX")

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

