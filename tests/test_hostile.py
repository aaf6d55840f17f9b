"""A hostile user's suite: inputs chosen to crash, hang or exhaust the machine, each run in a child
process with a timeout (a crash must fail the test, not end the test run), and hypothesis
driving the native module's entry points with random shapes, sizes and parameters.

What is allowed: a result, or ValueError / TypeError / OverflowError (PyO3's for a negative or
too large integer where the binding takes an unsigned one) with a message. What fails: a crash
(the child dies by a signal), a hang (the timeout), MemoryError (a size reached an allocation
before it was checked), and RuntimeError "internal error" (a panic caught by the binding's last
guard). The cases that need no child are in test_fork.py, test_interrupt.py (Ctrl-C),
test_threads.py (concurrent fits) and test_bad_input.py (huge budgets, absurd class counts,
overflowing norms), the reader's in test_datasets.py, the sparse sizes' in test_sparse.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

ALLOWED = ("ValueError", "TypeError", "OverflowError")

# Each case: a Python snippet whose last expression statement is the hostile call.
CASES = {
    # Sizes from parameters: never allocated before checked against the data.
    "budget 2**31": "BudgetSVC(budget=2**31).fit(X, y)",
    "budget 2**62 bsca": "BudgetSVC(budget=2**62, solver='bsca').fit(X, y3)",
    "budget 2**64": "BudgetSVC(budget=2**64).fit(X, y)",
    "epochs 0": "BudgetSVC(epochs=0).fit(X, y)",
    "n_jobs 10**6": "BudgetSVC(n_jobs=10**6, solver='bsca').fit(X, y3)",
    "KernelSVC n_jobs 10**4": "KernelSVC(n_jobs=10**4).fit(X, y)",
    "set_num_threads 10**6": "set_num_threads(10**6)",
    "cache_size 1e300": "KernelSVC(cache_size=1e300).fit(X, y)",
    "n_pairs 2**62": "KernelSVC(solver_options=dict(n_pairs=2**62)).fit(X, y)",
    "max_iter 2**63": "KernelSVC(max_iter=2**63).fit(X, y)",
    "fit_file chunk_rows 2**62": "BudgetSVC().fit_file(FILE, chunk_rows=2**62)",
    "fit_file n_features 2**62": "BudgetSVC().fit_file(FILE, n_features=2**62)",
    "iter chunks 2**62": "list(iter_svmlight_chunks(FILE, chunk_rows=2**62))",
    "load n_features 2**62": "load_svmlight_file(FILE, n_features=2**62)",
    "merge table 2**40": "merge_search([0.5], [0.5], 'lookup-wd', table_size=2**40)",
    # The native module directly, past the Python checks.
    "BsgdStream huge dim": (
        "_budgetsvm.BsgdStream(2**62, 2, c=1.0, gamma=1.0, budget=10, maintenance='merge', "
        "merge='lookup-wd', seed=0, n_samples=10).partial_fit(X, y.astype('uint32'))"
    ),
    "BsgdStream huge classes": (
        "_budgetsvm.BsgdStream(2, 2**40, c=1.0, gamma=1.0, budget=10, maintenance='merge', "
        "merge='lookup-wd', seed=0, n_samples=10)"
    ),
    "BsgdStream huge budget": (
        "_budgetsvm.BsgdStream(2, 2, c=1.0, gamma=1.0, budget=2**62, maintenance='merge', "
        "merge='lookup-wd', seed=0, n_samples=2**62).partial_fit(X, y.astype('uint32'))"
    ),
    "fit_bsgd classes 2**40": (
        "_budgetsvm.fit_bsgd(X, y.astype('uint32'), 2**40, c=1.0, gamma=1.0, budget=10, "
        "epochs=1, maintenance='merge', merge='lookup-wd', seed=0)"
    ),
    "fit_bsca label out of range": (
        "_budgetsvm.fit_bsca(X, (y * 7).astype('uint32'), 3, c=1.0, gamma=1.0, budget=10, "
        "epochs=1, maintenance='merge', merge='gss', seed=0)"
    ),
    "fit_exact classes 2**40": (
        "_budgetsvm.fit_exact(X, y.astype('uint32'), problem='svc', n_classes=2**40, c=1.0, "
        "gamma=1.0)"
    ),
    "fit_exact svr without targets": "_budgetsvm.fit_exact(X, None, problem='svr')",
    "fit_exact svr short targets": "_budgetsvm.fit_exact(X, np.zeros(3), problem='svr')",
    "fit_exact unknown problem": "_budgetsvm.fit_exact(X, None, problem='nope')",
    "fit_exact precomputed not square": (
        "_budgetsvm.fit_exact(X, None, problem='one_class', kernel='precomputed')"
    ),
    "fit_exact poly degree 2**40": (
        "_budgetsvm.fit_exact(X, None, problem='one_class', kernel='poly', degree=2**40)"
    ),
    "decision_from_kernel wrong width": (
        "_budgetsvm.decision_from_kernel(np.ones((3, 5)), np.ones((4, 1)))"
    ),
    "decision_function coef mismatch": (
        "_budgetsvm.decision_function(X, np.ones((3, 2)), 1.0, X)"
    ),
    "decision_function csr parts lie": (
        "_budgetsvm.decision_function((np.ones(3), np.array([0, 1, 2**40]), np.array([0, 3]), 5),"
        " np.ones((1, 1)), 1.0, X)"
    ),
    "kernel_rows out of range": "_budgetsvm.kernel_rows(X, 1.0, np.array([2**40], dtype=np.int64))",
    "kernel_rows negative": "_budgetsvm.kernel_rows(X, 1.0, np.array([-1], dtype=np.int64))",
    "state bytes garbage": "_budgetsvm.BsgdStream.from_bytes(b'budgetsvm' * 1000)",
    "rbf_kernel huge width csr": (
        "_budgetsvm.rbf_kernel((np.ones(1), np.array([2**62], dtype=np.int64), "
        "np.array([0, 1], dtype=np.int64), 2**62 + 1), X[:, :1].copy(), 1.0)"
    ),
    "summarize chunk 0": "_budgetsvm.summarize_libsvm(FILE, 0)",
}

PRELUDE = """
import numpy as np, scipy.sparse as sp
from budgetsvm import BudgetSVC, KernelSVC, set_num_threads, _budgetsvm
from budgetsvm.datasets import iter_svmlight_chunks, load_svmlight_file
from budgetsvm.merging import merge_search
rng = np.random.default_rng(0)
X = rng.normal(size=(60, 2))
y = (X[:, 0] > 0).astype(int)
y3 = y + (X[:, 1] > 0.5)
FILE = {file!r}
"""

RUNNER = """
import json, sys
try:
{body}
    print(json.dumps(["ok", ""]))
except BaseException as e:
    print(json.dumps([type(e).__name__, str(e)[:300]]))
"""


def run_hostile(code: str, tmp_path, timeout: float = 120.0):
    file = tmp_path / "small.svm"
    file.write_text("1 1:0.5 2:1\n-1 1:-0.5\n1 2:2\n-1 1:-1 2:-1\n")
    script = PRELUDE.format(file=str(file)) + RUNNER.format(body=textwrap.indent(code, "    "))
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout
    )
    assert run.returncode == 0, f"the child died ({run.returncode}):\n{run.stderr[-3000:]}"
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_call(name, tmp_path):
    kind, message = run_hostile(CASES[name], tmp_path)
    assert kind in ALLOWED + ("ok",), f"{name}: {kind}: {message}"
    assert "internal error" not in message, f"{name}: {message}"
    if kind != "ok":
        assert len(message) > 10, f"{name}: an exception without a useful message: {message!r}"


NATIVE_FUZZ = r"""
import json, sys
import numpy as np
from hypothesis import given, settings, HealthCheck, strategies as st
from budgetsvm import _budgetsvm

SIZES = st.sampled_from([0, 1, 2, 3, 7, 100, 2**31, 2**40, 2**62, 2**64 - 1, -1])
FLOATS = st.sampled_from([1.0, 0.5, 1e-300, 1e300, 0.0, -1.0, float("nan"), float("inf")])
ALLOWED = ("ValueError", "TypeError", "OverflowError")
bad = []

def arrays(draw):
    n = draw(st.integers(0, 6)); d = draw(st.integers(0, 4))
    kind = draw(st.sampled_from(["dense", "csr", "f32", "fortran", "nan"]))
    x = np.random.default_rng(draw(st.integers(0, 99))).normal(size=(n, d))
    if kind == "csr":
        indptr = np.arange(n + 1, dtype=np.int64) * min(d, 1)
        indices = np.zeros(indptr[-1], dtype=np.int64) + draw(st.sampled_from([0, 1, 2**40, -1]))
        return (np.ones(indptr[-1]), indices, indptr, draw(SIZES))
    if kind == "f32":
        return x.astype(np.float32)
    if kind == "fortran":
        return np.asfortranarray(x)
    if kind == "nan" and x.size:
        x.flat[0] = np.nan
    return x

def call(name, f):
    try:
        f()
    except BaseException as e:
        if type(e).__module__.startswith("hypothesis"):
            raise  # hypothesis's own control flow (draws inside the call)
        kind = type(e).__name__
        if kind not in ALLOWED or "internal error" in str(e):
            bad.append([name, kind, str(e)[:200]])

@settings(max_examples=int(sys.argv[1]), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def run(data):
    d = data.draw
    x = arrays(d)
    y = np.asarray(d(st.lists(st.integers(0, 3), max_size=7)), dtype=np.uint32)
    common = dict(c=d(FLOATS), gamma=d(FLOATS), budget=d(SIZES), epochs=d(st.sampled_from([1, 2])),
                  maintenance=d(st.sampled_from(["merge", "remove", "project", "bogus"])),
                  merge=d(st.sampled_from(["gss", "lookup-wd", "x"])), seed=d(st.integers(0, 2**64 - 1)))
    k = d(SIZES)
    print(json.dumps([repr(type(x)), str(common), k]), flush=True)
    call("fit_bsgd", lambda: _budgetsvm.fit_bsgd(x, y, k, **common))
    call("fit_bsca", lambda: _budgetsvm.fit_bsca(x, y, k, **common))
    call("fit_exact", lambda: _budgetsvm.fit_exact(
        x, y, problem="svc", n_classes=k, c=common["c"], gamma=common["gamma"], n_pairs=d(SIZES),
        cache_size=d(FLOATS), max_iter=3, n_threads=d(st.sampled_from([None, 0, 1, 2**20]))))
    call("fit_exact svr", lambda: _budgetsvm.fit_exact(
        x, d(st.sampled_from([None, y.astype(np.float64), np.full(len(y), np.nan)])),
        problem=d(st.sampled_from(["svr", "one_class", "x"])), c=common["c"],
        epsilon=d(FLOATS), nu=d(FLOATS), gamma=common["gamma"], max_iter=3,
        kernel=d(st.sampled_from(["rbf", "poly", "sigmoid", "linear", "precomputed", "?"])),
        degree=d(st.integers(-2, 70)), coef0=d(FLOATS)))
    call("BsgdStream", lambda: _budgetsvm.BsgdStream(
        d(SIZES), k, c=common["c"], gamma=common["gamma"], budget=common["budget"],
        maintenance=common["maintenance"], merge=common["merge"], seed=1,
        n_samples=d(SIZES)).partial_fit(x, y))
    call("decision_function", lambda: _budgetsvm.decision_function(
        x, np.ones((d(st.integers(0, 6)), d(st.integers(0, 3)))), common["gamma"], arrays(d),
        n_threads=d(st.sampled_from([None, 0, 1]))))
    call("rbf_kernel", lambda: _budgetsvm.rbf_kernel(x, arrays(d), common["gamma"]))
    call("kernel_rows", lambda: _budgetsvm.kernel_rows(
        x, common["gamma"], np.asarray(d(st.lists(SIZES, max_size=3)), dtype=np.int64)
        if d(st.booleans()) else np.array([0], dtype=np.int64)))
    call("feature_variance", lambda: _budgetsvm.feature_variance(x))
    call("merge_search", lambda: _budgetsvm.merge_search(
        np.array([d(FLOATS)]), np.array([d(FLOATS)]), d(st.sampled_from(["gss", "lookup-h", "?"])),
        d(st.sampled_from([None, 2, 400, 2**40]))))

run()
print(json.dumps(["done", bad]))
"""


def test_native_entry_points_under_hypothesis():
    """Random shapes, sizes and parameters straight into the native module, in a child (a
    crash would otherwise end the run): only clear exceptions, never an internal error."""
    run = subprocess.run(
        [sys.executable, "-c", NATIVE_FUZZ, "150"], capture_output=True, text=True, timeout=600
    )
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, (
        f"the child died ({run.returncode}) after input {last}:\n{run.stderr[-3000:]}"
    )
    status, bad = json.loads(last)
    assert status == "done"
    assert bad == [], bad
