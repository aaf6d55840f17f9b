"""Estimators under threads: a refit while other threads predict, pickle or set parameters, and
the thread counts that the environment and threadpoolctl ask for."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest
from budgetsvm import (
    BudgetSVC,
    BudgetSVR,
    KernelNuSVC,
    KernelNuSVR,
    KernelOneClassSVM,
    KernelSVC,
    KernelSVR,
    get_num_threads,
    set_num_threads,
)
from conftest import fitting_in_another_thread, xor_data
from numpy.testing import assert_allclose, assert_array_equal

ESTIMATORS = {
    "BudgetSVC": lambda: BudgetSVC(budget=50, epochs=2, random_state=0),
    "BudgetSVR": lambda: BudgetSVR(budget=50, epochs=2, random_state=0),
    "KernelSVC": lambda: KernelSVC(),
    "KernelNuSVC-scale": lambda: KernelNuSVC(gamma="scale"),
    "KernelNuSVC-fixed": lambda: KernelNuSVC(gamma=0.5),
    "KernelSVR": lambda: KernelSVR(),
    "KernelNuSVR": lambda: KernelNuSVR(),
    "KernelOneClassSVM": lambda: KernelOneClassSVM(),
}


def two_halves(name: str):
    """Two training sets whose models differ, in every attribute (gamma='scale' too)."""
    X, y = xor_data(1600, 11)
    first, second = (X[:800], y[:800]), (X[800:] * 1.5, y[800:])
    if "SVR" in name:
        first = (first[0], first[0][:, 0] - first[0][:, 1])
        second = (second[0], second[0][:, 0] * second[0][:, 1])
    return first, second


def fit(estimator, rows):
    X, y = rows
    return estimator.fit(X) if isinstance(estimator, KernelOneClassSVM) else estimator.fit(X, y)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_predictions_during_a_refit_come_from_the_old_model_or_the_new(name):
    make = ESTIMATORS[name]
    first, second = two_halves(name)
    probe = xor_data(300, 12)[0]
    expected = [fit(make(), rows).decision_function(probe)
                if not name.endswith("SVR") else fit(make(), rows).predict(probe)
                for rows in (first, second)]
    shared = fit(make(), first)
    method = shared.predict if name.endswith("SVR") else shared.decision_function
    errors: list = []

    def refit() -> None:
        try:
            for k in range(6):
                fit(shared, second if k % 2 == 0 else first)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    worker = threading.Thread(target=refit)
    worker.start()
    seen = 0
    while worker.is_alive() or seen == 0:
        values = method(probe)
        matches = [np.allclose(values, e, rtol=1e-10, atol=1e-12) for e in expected]
        assert any(matches), f"a prediction from neither model (after {seen} good ones)"
        seen += 1
    worker.join()
    assert not errors, errors


def test_set_params_during_a_fit_is_refused_and_the_previous_model_stays():
    X, y = xor_data(20_000, 5)
    clf = BudgetSVC(budget=200, epochs=1, random_state=0).fit(X[:500], y[:500])
    before = clf.decision_function(X[:100])
    pickled_before = pickle.dumps(clf)
    with fitting_in_another_thread(clf, lambda: clf.fit(np.tile(X, (10, 1)), np.tile(y, 10))):
        with pytest.raises(RuntimeError, match="being fitted in another thread"):
            clf.set_params(C=5.0)
        assert clf.C == 1.0
        # Meanwhile the estimator is the previous model in every respect, pickled too.
        assert_allclose(clf.decision_function(X[:100]), before)
        assert pickle.dumps(clf) == pickled_before
    assert clf.set_params(C=5.0).C == 5.0
    assert not np.allclose(clf.decision_function(X[:100]), before)


def test_a_second_fit_from_another_thread_is_refused_and_predict_keeps_working():
    X, y = xor_data(20_000, 5)
    clf = BudgetSVC(budget=200, epochs=1, random_state=0).fit(X[:500], y[:500])
    before = clf.predict(X[:100])
    with fitting_in_another_thread(  # seconds of work
        clf, lambda: clf.partial_fit(np.tile(X, (100, 1)), np.tile(y, 100))
    ):
        with pytest.raises(RuntimeError, match="being fitted in another thread"):
            clf.partial_fit(X[:10], y[:10])
        assert_array_equal(clf.predict(X[:100]), before)  # the previous model, meanwhile
    clf.partial_fit(X[:10], y[:10])  # free again


def test_an_interrupted_fit_says_what_stopped_and_leaves_the_estimator():
    X, y = xor_data(200, 6)
    clf = KernelSVC().fit(X, y)
    before = clf.decision_function(X)

    def interrupted(A, B):
        raise KeyboardInterrupt  # as Python raises it on Ctrl-C: without a message

    clf.set_params(kernel=interrupted)
    with pytest.raises(KeyboardInterrupt, match=r"KernelSVC\.fit interrupted \(Ctrl-C\); the "
                       "estimator is unchanged"):
        clf.fit(X, y)
    clf.set_params(kernel="rbf")
    assert_allclose(clf.decision_function(X), before)


def threads_in(env: dict, code: str) -> dict:
    """Runs ``code`` (which prints a JSON dict) in a fresh interpreter with ``env`` added."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS")}
    environment.update(env)
    out = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True,
        timeout=300, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


POOL_THREADS = """
import json, os, numpy as np
from budgetsvm import KernelSVC, get_num_threads
from threadpoolctl import threadpool_limits
import time
def pool_threads():
    # A thread names itself once it runs: on a busy machine the last ones may take a moment.
    for _ in range(100):
        names = []
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as f:
                    names.append(f.read().strip())
            except OSError:
                pass
        count = sum(1 for n in names if n.startswith("budgetsvm-") and "fit" not in n)
        if count == get_num_threads():
            break
        time.sleep(0.05)
    return count
X = np.random.default_rng(0).normal(size=(400, 3)); y = (X[:, 0] > 0).astype(int)
KernelSVC().fit(X, y)
out = {"count": get_num_threads(), "pool": pool_threads()}
with threadpool_limits(1):
    KernelSVC().fit(X, y)
    out["limited"] = get_num_threads()
    out["limited_pool"] = pool_threads()
out["after"] = get_num_threads()
os.environ["OMP_NUM_THREADS"] = "1"
KernelSVC().fit(X, y)
out["later"] = get_num_threads()
out["later_pool"] = pool_threads()
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
@pytest.mark.parametrize(
    "env, count",
    [({}, None), ({"OMP_NUM_THREADS": "1"}, 1), ({"OMP_NUM_THREADS": "3,2"}, 3),
     ({"RAYON_NUM_THREADS": "3", "OMP_NUM_THREADS": "1"}, 3), ({"OMP_NUM_THREADS": "x"}, None)],
    ids=["none", "omp", "omp-nested", "rayon-first", "omp-invalid"],
)
def test_the_pool_follows_the_environment_and_threadpoolctl(env, count):
    # None: the machine's cores as the engine counts them (affinity and cgroup quota included,
    # which os.cpu_count() is not), read without either variable.
    count = count or threads_in({}, "import json, budgetsvm; "
                                    "print(json.dumps({'n': budgetsvm.get_num_threads()}))")["n"]
    out = threads_in(env, POOL_THREADS)
    assert out["count"] == out["pool"] == count
    assert out["limited"] == out["limited_pool"] == 1
    assert out["after"] == count  # the limit is undone to the default, which follows the env
    if "RAYON_NUM_THREADS" in env:
        assert out["later"] == out["later_pool"] == count  # rayon's variable comes first
    else:
        assert out["later"] == out["later_pool"] == 1  # a limit set after import counts


def test_n_jobs_and_set_num_threads_override_the_environment():
    out = threads_in({"OMP_NUM_THREADS": "1"}, """
import json
from budgetsvm import get_num_threads, set_num_threads
set_num_threads(2)
a = get_num_threads()
set_num_threads(0)
print(json.dumps({"set": a, "default": get_num_threads()}))
""")
    assert out == {"set": 2, "default": 1}


def test_thread_counts_are_validated():
    before = get_num_threads()
    with pytest.raises(ValueError, match="threads"):
        set_num_threads(10**6)
    assert get_num_threads() == before
    X, y = xor_data(100, 2)
    with pytest.raises(ValueError, match="n_jobs"):
        KernelSVC(n_jobs=10_000).fit(X, y)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
@pytest.mark.parametrize("n_classes", [2, 3])
def test_n_jobs_reaches_the_polish_and_the_class_pairs(n_classes):
    # With n_jobs the polish (and one-vs-one's pairs) run on a pool made for the fit
    # ("budgetsvm-fit-*"), without it on the process-wide pool ("budgetsvm-*"): seen from the
    # callback, which the engine calls on the threads doing the work.
    from budgetsvm import BudgetSVC

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    y = np.digitize(X[:, 0], np.linspace(-0.5, 0.5, n_classes - 1))
    for n_jobs, fit_pool in [(1, True), (None, False)]:
        seen = {}

        def callback(info, seen=seen):
            with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
                name = f.read().strip()
            seen.setdefault("polish" if info.get("polish") else "pass", set()).add(name)

        callback.wants_polish = True
        BudgetSVC(budget=6 * n_classes, n_jobs=n_jobs, multiclass="ovo", random_state=0).fit(
            X, y, _callback=callback
        )
        phases = ["polish", "pass"] if n_classes > 2 else ["polish"]  # a binary pass: caller's
        for phase in phases:
            assert seen[phase], phase
            for name in seen[phase]:
                assert name.startswith("budgetsvm-") and ("-fit-" in name) == fit_pool, (
                    phase, name)
