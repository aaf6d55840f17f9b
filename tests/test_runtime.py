"""Runtime behaviour: the GIL is released during training, Ctrl-C stops it, threads are safe."""

from __future__ import annotations

import sys
import textwrap
import threading

import numpy as np
import pytest
from budgetsvm import BudgetSVC
from conftest import assert_ctrl_c_stops_fit
from numpy.testing import assert_array_equal


def linear_data(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    return X, y


class FitThread(threading.Thread):
    """Runs clf.fit in a thread and keeps any exception for the test to re-raise."""

    def __init__(self, clf, X, y):
        super().__init__(daemon=True)
        self.clf, self.X, self.y = clf, X, y
        self.error: BaseException | None = None

    def run(self):
        try:
            self.clf.fit(self.X, self.y)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            self.error = exc

    def result(self, timeout: float = 300.0):
        self.join(timeout)
        assert not self.is_alive(), "fit did not finish"
        if self.error is not None:
            raise self.error
        return self.clf


SOLVERS = ("bsgd", "bsca")


@pytest.mark.parametrize("solver", SOLVERS)
def test_fit_releases_the_gil(monkeypatch, solver):
    # The main thread counts in pure Python while another thread trains. Each epoch line (verbose)
    # records the count at that moment: between the first and the last epoch the trainer runs in
    # Rust, so if the GIL were held there the count could not move.
    X, y = linear_data(20000, 20, seed=50)
    counter = [0]
    marks: list[int] = []

    class Recorder:
        def write(self, text: str) -> int:
            if "epoch" in text:  # the budgeted pass's lines (the polish prints its own after)
                marks.append(counter[0])
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stdout", Recorder())
    epochs = 40
    clf = BudgetSVC(budget=100, epochs=epochs, verbose=True, solver=solver, random_state=0)
    worker = FitThread(clf, X, y)
    worker.start()
    while worker.is_alive():
        counter[0] += 1
    clf = worker.result()
    monkeypatch.undo()
    assert len(marks) == epochs
    assert marks[-1] - marks[0] > 1000, (marks[0], marks[-1])
    assert clf.support_vectors_.shape[0] <= 100


SUBPROCESS_FIT = textwrap.dedent(
    """
    import numpy as np
    from budgetsvm import BudgetSVC

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, 20))
    y = (X[:, 0] > 0).astype(int) + {extra_classes} * (X[:, 1] > 0.5)
    BudgetSVC(
        budget=100, epochs=1_000_000, verbose=True, solver="{solver}", random_state=0
    ).fit(X, y)
    print("FINISHED", flush=True)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
@pytest.mark.parametrize(
    "solver,extra_classes",
    [("bsgd", 0), ("bsgd", 1), ("bsca", 0), ("bsca", 1)],
    ids=["bsgd-binary", "bsgd-multiclass", "bsca-binary", "bsca-multiclass"],
)
def test_ctrl_c_stops_fit(tmp_path, solver, extra_classes):
    # Multi-class BSCA runs its one-vs-rest problems on worker threads: the interrupt must still
    # reach them.
    code = SUBPROCESS_FIT.format(solver=solver, extra_classes=extra_classes)
    # Wait (generously) for the first epoch line: training is under way.
    assert_ctrl_c_stops_fit(code, tmp_path, wait=60.0, first_line_has="epoch 1/1000000")


def test_long_fit_in_thread_without_callback():
    X, y = linear_data(20000, 20, seed=51)
    X_test, y_test = linear_data(2000, 20, seed=52)
    worker = FitThread(BudgetSVC(budget=100, epochs=10, random_state=0), X, y)
    worker.start()
    clf = worker.result()
    pred = clf.predict(X_test)
    assert pred.shape == (2000,)
    assert set(pred) <= {0, 1}
    assert clf.score(X_test, y_test) > 0.85
    assert clf.fit_stats_["iterations"] == 10 * 20000


def test_concurrent_fits_match_sequential():
    datasets = [linear_data(3000, 10, seed=s) for s in (53, 54)]
    params = [dict(random_state=1), dict(random_state=2, maintenance="project")]
    sequential = [
        BudgetSVC(budget=50, epochs=3, **p).fit(X, y) for p, (X, y) in zip(params, datasets)
    ]
    workers = [
        FitThread(BudgetSVC(budget=50, epochs=3, **p), X, y) for p, (X, y) in zip(params, datasets)
    ]
    for w in workers:
        w.start()
    for w, ref, (X, _) in zip(workers, sequential, datasets):
        clf = w.result()
        assert_array_equal(clf.support_vectors_, ref.support_vectors_)
        assert_array_equal(clf.dual_coef_, ref.dual_coef_)
        assert_array_equal(clf.decision_function(X), ref.decision_function(X))


@pytest.mark.parametrize("solver", SOLVERS)
def test_callback_error_propagates(monkeypatch, solver):
    # An exception raised while reporting an epoch (here: a broken stdout) stops training and
    # comes out of fit unchanged.
    class Broken:
        def write(self, text: str) -> int:
            raise OSError("stdout is gone")

        def flush(self) -> None:
            pass

    X, y = linear_data(500, 3, seed=55)
    monkeypatch.setattr(sys, "stdout", Broken())
    with pytest.raises(OSError, match="stdout is gone"):
        BudgetSVC(budget=10, epochs=3, verbose=True, solver=solver, random_state=0).fit(X, y)


@pytest.mark.parametrize("solver", SOLVERS)
def test_history_error_propagates(monkeypatch, solver):
    # An exception inside the per-epoch history recorder stops training and comes out of fit.
    from budgetsvm import _history

    def broken(self, info):
        raise RuntimeError("recorder failed")

    monkeypatch.setattr(_history.HistoryRecorder, "__call__", broken)
    X, y = linear_data(500, 3, seed=56)
    with pytest.raises(RuntimeError, match="recorder failed"):
        BudgetSVC(budget=10, epochs=3, solver=solver, record_history=True).fit(X, y)
