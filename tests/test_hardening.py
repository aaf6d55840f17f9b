"""Hostile-user cases: forked children keep working, thread counts are checked, Ctrl-C reaches
every long computation whichever thread runs it and leaves the estimator usable."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading

import numpy as np
import pytest
from budgetsvm import BudgetSVC, KernelSVC, get_num_threads, set_num_threads
from conftest import default_sigint, fitting_in_another_thread, xor_data
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
    # Each takes seconds (the budgeted ones 5-10 s: bounded, so a missed interrupt fails the
    # test instead of hanging it); the interrupt comes after half a second.
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
    # Ctrl-C lands there too (it used to wait for the whole start: 4.5 s on these rows).
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


def test_a_failed_fit_leaves_the_previous_model():
    X, y = xor_data(500, 4)
    clf = BudgetSVC(budget=20, epochs=2, random_state=0).fit(X, y)
    before = clf.decision_function(X)
    classes, n_features = clf.classes_.copy(), clf.n_features_in_
    wide = np.hstack([X, X])
    with pytest.raises(ValueError, match="one class"):
        clf.fit(wide, np.zeros(len(y)))  # passes validation, fails after classes_ would be set
    assert_array_equal(clf.classes_, classes)
    assert clf.n_features_in_ == n_features
    assert_array_equal(clf.decision_function(X), before)
    kernel = KernelSVC(C=1.0, gamma=1.0).fit(X, y)
    kbefore = kernel.decision_function(X)
    with pytest.raises(ValueError):
        kernel.fit(wide, np.zeros(len(y)))
    assert_array_equal(kernel.decision_function(X), kbefore)


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


def test_labels_equal_as_numbers_are_one_class_in_fit_file(tmp_path):
    from budgetsvm.datasets import load_svmlight_file

    X, y = xor_data(300, 6)
    path = tmp_path / "zeros.svm"
    with open(path, "w") as f:
        for i, (row, label) in enumerate(zip(X, y)):
            text = ("-0" if i % 2 else "0") if label == 0 else "1"
            f.write(f"{text} 1:{float(row[0])!r} 2:{float(row[1])!r}\n")
    params = dict(budget=20, epochs=2, shuffle=False, gamma=1.0, random_state=0)
    from_file = BudgetSVC(**params).fit_file(path)
    Xl, yl = load_svmlight_file(path)
    in_memory = BudgetSVC(**params).fit(Xl, yl)
    assert len(from_file.classes_) == 2
    assert_array_equal(from_file.classes_, in_memory.classes_)
    assert_array_equal(from_file.dual_coef_, in_memory.dual_coef_)


def test_cli_refuses_to_overwrite_its_inputs(tmp_path):
    import subprocess

    X, y = xor_data(200, 7)
    train = tmp_path / "t.svm"
    with open(train, "w") as f:
        for row, label in zip(X, y):
            f.write(f"{label} 1:{float(row[0])!r} 2:{float(row[1])!r}\n")
    original = train.read_bytes()

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "budgetsvm", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=300,
        )

    r = cli("train", "-q", train, train)
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    assert train.read_bytes() == original
    model = tmp_path / "m.model"
    assert cli("train", "-q", "-g", 1, train, model).returncode == 0
    r = cli("predict", train, model, train)
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    assert train.read_bytes() == original


@pytest.mark.parametrize("budget", [2**31, 2**40, 2**62])
@pytest.mark.parametrize("solver", ["bsgd", "bsca"])
def test_huge_budgets_cost_nothing(budget, solver):
    # The store grows with the support vectors that exist, never with the budget asked for.
    X, y = xor_data(300, 8)
    clf = BudgetSVC(budget=budget, epochs=1, solver=solver, random_state=0).fit(X, y)
    assert clf.support_vectors_.shape[0] <= 300
    assert clf.score(X, y) > 0.5


@pytest.mark.parametrize("n_classes", [2**20 + 1, 2**40])
def test_native_entry_points_refuse_absurd_class_counts(n_classes):
    from budgetsvm import _budgetsvm

    X, y = xor_data(50, 9)
    common = dict(c=1.0, gamma=1.0, budget=10, maintenance="merge", merge="lookup-wd", seed=0)
    with pytest.raises(ValueError, match="classes"):
        _budgetsvm.BsgdStream(2, n_classes, n_samples=50, **common)
    with pytest.raises(ValueError, match="classes"):
        _budgetsvm.fit_bsgd(X, y.astype(np.uint32), n_classes, epochs=1, **common)
    with pytest.raises(ValueError, match="classes"):
        _budgetsvm.fit_bsca(X, y.astype(np.uint32), n_classes, epochs=1, **common)
    with pytest.raises(ValueError, match="classes"):
        _budgetsvm.fit_exact(X, y.astype(np.uint32), problem="svc", n_classes=n_classes, c=1.0, gamma=1.0)


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


def test_save_model_of_a_foreign_estimator_says_what_to_do(tmp_path):
    from budgetsvm import save_model
    from sklearn.svm import SVC

    X, y = xor_data(100, 12)
    with pytest.raises(TypeError, match="model files hold BudgetSVC, .*KernelSVC.*not SVC.*pickle"):
        save_model(SVC().fit(X, y), tmp_path / "k.model")
    assert not (tmp_path / "k.model").exists()


@pytest.mark.parametrize(
    "make",
    [
        lambda: BudgetSVC(gamma=1e-308, random_state=0),
        lambda: BudgetSVC(gamma=1e-308, solver="bsca", random_state=0),
        lambda: KernelSVC(gamma=1e-308),
    ],
    ids=["bsgd", "bsca", "kernel"],
)
def test_norms_whose_sum_overflows_are_refused_not_nan(make):
    # Rows with |x|^2 near 1.7e308 are finite, but |x|^2 + |z|^2 overflows and the kernel value
    # came out NaN for every such pair: refused with the row named, in fit and in predict.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    X /= np.linalg.norm(X, axis=1)[:, None]
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match="squared norm .* rescale"):
        make().fit(X * 1.3e154, y)
    clf = make().fit(X * 1e150, y)
    assert np.all(np.isfinite(clf.decision_function(X * 1e150)))
    with pytest.raises(ValueError, match="squared norm .* rescale"):
        clf.decision_function(X[:3] * 1.3e154)


def test_fit_file_refuses_pipes_instead_of_blocking(tmp_path):
    # fit_file reads its file once per epoch plus a first pass: a FIFO would block the second
    # open forever, /dev/stdin would give its rows to the first pass only.
    import subprocess

    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="regular file"):
        BudgetSVC().fit_file(fifo)
    run = subprocess.run(
        [sys.executable, "-m", "budgetsvm", "train", "--stream", "/dev/stdin", str(tmp_path / "m")],
        input="1 1:0.5\n-1 1:-0.5\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, run
    assert "regular file" in run.stderr
    assert not (tmp_path / "m").exists()


def test_ctrl_c_during_the_first_read_is_a_keyboard_interrupt(tmp_path):
    # The first arrays of a process used to load NumPy's C API while the Ctrl-C was pending:
    # a PanicException ("NumPy array API capsule") instead of KeyboardInterrupt.
    import bz2

    from conftest import interrupt_after_first_line

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
    from conftest import interrupt_after_first_line

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
    from conftest import interrupt_after_first_line

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
