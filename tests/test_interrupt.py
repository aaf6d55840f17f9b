"""Ctrl-C reaches every long computation, whichever thread runs it (a fit of each solver, the
start of an exact fit, a prediction, fit_file, the first read of a process, partial_fit, the
polish, the command line), and leaves the estimator usable: refitted afterwards, or as it was
before the interrupted call. (The budgeted fits in a child process: tests/test_runtime.py.)"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

import numpy as np
import pytest
from budgetsvm import BudgetSVC, KernelSVC
from conftest import default_sigint, interrupt_after_first_line, xor_data
from numpy.testing import assert_array_equal

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is POSIX")


@contextlib.contextmanager
def _interrupt_after(seconds: float):
    """SIGINT to this process after ``seconds``, with Python's handler installed for the
    duration (a test run started with SIGINT ignored, as a background job or under nohup, would
    otherwise ignore it and the fit would run to its end), the previous handler restored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


LONG_FITS = {
    # Each takes seconds (bounded, so a missed interrupt fails the test instead of hanging it;
    # their times: docs/interrupt_latency.md); the interrupt comes after half a second.
    "bsgd-binary": lambda: BudgetSVC(budget=200, epochs=2_000, random_state=0, polish=False),
    "bsca-binary": lambda: BudgetSVC(
        budget=200, epochs=2_000, solver="bsca", random_state=0, polish=False
    ),
    "bsca-multiclass": lambda: BudgetSVC(
        budget=200, epochs=2_000, solver="bsca", random_state=0, polish=False
    ),
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
    with _interrupt_after(0.5), pytest.raises(KeyboardInterrupt):
        clf.fit(X, y)
    # Usable afterwards: a short fit of the same estimator works.
    if isinstance(clf, BudgetSVC):
        clf.set_params(epochs=1)
    else:
        clf.set_params(tol=1e-2, C=1.0, gamma=1.0, max_iter=-1)
    clf.fit(X[:500], y[:500])
    assert clf.predict(X[:10]).shape == (10,)


@posix_only
@pytest.mark.parametrize("solver", ["alfpgm", "smo"])
def test_ctrl_c_right_after_an_exact_fit_starts(solver):
    # A one-class (or nu) fit starts from thousands of rows at their bound: the gradient of
    # that start is built from their kernel rows, in batches that report to the monitor, so
    # Ctrl-C lands there too (it used to wait for the whole start: docs/interrupt_latency.md).
    from budgetsvm import KernelNuSVC, KernelOneClassSVM

    rng = np.random.default_rng(3)
    X = rng.normal(size=(40_000, 20))
    for est in (KernelOneClassSVM(nu=0.5, solver=solver, gamma=0.05),
                KernelNuSVC(nu=0.5, solver=solver, gamma=0.05)):
        y = (X[:, 0] > 0).astype(int)
        with _interrupt_after(0.2), pytest.raises(KeyboardInterrupt):
            est.fit(X) if isinstance(est, KernelOneClassSVM) else est.fit(X, y)
        assert not hasattr(est, "support_")


@posix_only
def test_ctrl_c_stops_predict_on_a_large_matrix():
    X, y = xor_data(2000, 3)
    clf = BudgetSVC(budget=500, epochs=1, random_state=0, C=100.0, gamma=20.0).fit(X, y)
    big = np.random.default_rng(1).uniform(-1, 1, size=(10_000_000, 2))
    with _interrupt_after(0.5), pytest.raises(KeyboardInterrupt):
        clf.decision_function(big)
    assert_array_equal(clf.predict(X[:100]), clf.predict(X[:100]))


def _write_points(path, X, y) -> None:
    with open(path, "w") as f:
        for row, label in zip(X, y):
            f.write(f"{label} 1:{float(row[0])!r} 2:{float(row[1])!r}\n")


@posix_only
def test_ctrl_c_stops_fit_file_and_the_estimator_refits(tmp_path):
    X, y = xor_data(50_000, 10)
    path = tmp_path / "big.svm"
    _write_points(path, X, y)
    clf = BudgetSVC(budget=200, epochs=500, gamma=2.0, random_state=0)
    with _interrupt_after(0.5), pytest.raises(KeyboardInterrupt):
        clf.fit_file(path, chunk_rows=5_000)
    clf.set_params(epochs=1).fit_file(path, chunk_rows=5_000)
    assert clf.score(X, y) > 0.8


@posix_only
def test_ctrl_c_stops_the_cli_with_exit_code_130(tmp_path):
    import subprocess
    import time

    X, y = xor_data(50_000, 11)
    path = tmp_path / "big.svm"
    _write_points(path, X, y)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "budgetsvm",
            "train",
            "-q",
            "-e",
            "100000",
            "-g",
            "2",
            path,
            tmp_path / "m",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    time.sleep(3.0)  # started and training (not a timing assertion: any moment of the fit will do)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert not (tmp_path / "m").exists()


def test_ctrl_c_during_the_first_read_is_a_keyboard_interrupt(tmp_path):
    # The first arrays of a process used to load NumPy's C API while the Ctrl-C was pending:
    # a PanicException ("NumPy array API capsule") instead of KeyboardInterrupt.
    import bz2

    rng = np.random.default_rng(0)
    rows = rng.integers(0, 1000, size=(200_000, 12))
    lines = "\n".join(
        "1 " + " ".join(f"{c + 1}:{v}" for c, v in enumerate(r)) for r in rows[:, :]
    )
    path = tmp_path / "big.svm.bz2"
    path.write_bytes(bz2.compress(lines.encode(), compresslevel=1))
    code = (
        "from budgetsvm.datasets import load_svmlight_file\n"
        "print('reading', flush=True)\n"
        f"load_svmlight_file({str(path)!r})\n"
    )
    first, rc, out, err = interrupt_after_first_line(code, tmp_path, wait=60)
    assert first.startswith("reading")
    assert "PanicException" not in err and "capsule" not in err, err
    assert "KeyboardInterrupt" in err, err


def test_interrupted_partial_fit_leaves_the_run_as_it_was(tmp_path):
    # partial_fit advances a copy of the run: Ctrl-C in the middle of a batch leaves the steps,
    # the model and the next call exactly as if the interrupted call had not happened.
    code = (
        "import numpy as np\n"
        "from budgetsvm import BudgetSVC\n"
        "rng = np.random.default_rng(0)\n"
        "X = rng.normal(size=(400, 5)); y = (X[:, 0] > 0).astype(int)\n"
        "kw = dict(budget=50, shuffle=False, random_state=0)\n"
        "a = BudgetSVC(**kw).partial_fit(X, y, classes=[0, 1])\n"
        "b = BudgetSVC(**kw).partial_fit(X, y, classes=[0, 1])\n"
        "steps, before = a._stream.steps, a.decision_function(X)\n"
        "big = rng.normal(size=(3_000_000, 5)); yb = (big[:, 0] > 0).astype(int)\n"
        "import threading, time\n"
        "# The line (and so the signal) once the native pass is under way.\n"
        "threading.Thread(target=lambda: (time.sleep(0.7), print('fitting', flush=True))).start()\n"
        "try:\n"
        "    a.partial_fit(big, yb)\n"
        "    print('not interrupted')\n"
        "except KeyboardInterrupt:\n"
        "    assert a._stream.steps == steps, (a._stream.steps, steps)\n"
        "    assert np.array_equal(a.decision_function(X), before)\n"
        "    a.partial_fit(X, y); b.partial_fit(X, y)\n"
        "    assert np.array_equal(a.decision_function(X), b.decision_function(X))\n"
        "    print('intact')\n"
    )
    first, rc, out, err = interrupt_after_first_line(code, tmp_path, wait=120)
    assert first.startswith("fitting")
    assert "intact" in out, (out, err)


@pytest.mark.parametrize("path", ["newton", "hessian-free"])
def test_interrupted_polish_leaves_the_model_as_it_was(tmp_path, path):
    # Ctrl-C in the middle of the polish (between its passes over the rows, or between the
    # waves of a Hessian product that computes its rows again): KeyboardInterrupt, and the
    # estimator keeps the coefficients it had.
    from budgetsvm import _budgetsvm

    budget = 300 if path == "newton" else _budgetsvm.HESSIAN_FREE_BASIS
    code = (
        "import numpy as np\n"
        "from budgetsvm import BudgetSVC\n"
        "rng = np.random.default_rng(0)\n"
        "X = rng.normal(size=(300_000, 8)); y = (X[:, 0] * X[:, 1] > 0).astype(int)\n"
        f"clf = BudgetSVC(budget={budget}, epochs=1, random_state=0, polish=False)\n"
        "clf.fit(X[:20_000], y[:20_000])\n"
        "before = clf.dual_coef_.copy()\n"
        "# No cache: every pass recomputes the kernel values, so the solve takes seconds.\n"
        "clf.set_params(verbose=True, polish_cache_size=0, polish_tol=0.0)\n"
        "try:\n"
        "    clf.polish_coef(X, y)\n"
        "    print('not interrupted')\n"
        "except KeyboardInterrupt:\n"
        "    assert np.array_equal(clf.dual_coef_, before)\n"
        "    assert np.all(clf.intercept_ == 0)\n"
        "    print('intact')\n"
    )
    first, rc, out, err = interrupt_after_first_line(code, tmp_path, wait=120)
    assert first.startswith("[budgetsvm] polish iteration 1"), (first, err)
    assert "intact" in out, (out, err)

