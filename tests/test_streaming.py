"""Streaming training: partial_fit continues one BSGD run, file training in chunks."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import BudgetSVC
from budgetsvm.datasets import iter_svmlight_chunks, load_svmlight_file
from conftest import assert_pickled_stream_continues_identically, xor_data
from numpy.testing import assert_array_equal

CHUNKS = [(0, 300), (300, 301), (301, 750), (750, 1200)]


def three_classes(n: int, seed: int):
    X, y = xor_data(n, seed)
    y = np.where(X[:, 0] > 0.6, 2, y)
    return X, y


def model_of(clf: BudgetSVC):
    return clf.support_vectors_, clf.dual_coef_


@pytest.mark.parametrize("maintenance", ["merge", "remove", "project"])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("use_lam", [False, True])
def test_partial_fit_over_chunks_equals_fit_on_concatenation(maintenance, n_classes, use_lam):
    X, y = xor_data(1200, 1) if n_classes == 2 else three_classes(1200, 1)
    params = dict(
        C=10.0,
        gamma=2.0,
        budget=20,
        epochs=1,
        shuffle=False,
        maintenance=maintenance,
        random_state=3,
        lam=1e-3 if use_lam else None,
        # One budgeted run for several classes too (one-vs-one streams:
        # tests/test_multiclass_streams.py).
        multiclass="shared",
    )
    whole = BudgetSVC(**params, polish=False).fit(X, y)
    stream = BudgetSVC(**params)
    for a, b in CHUNKS:
        stream.partial_fit(X[a:b], y[a:b], classes=np.unique(y), n_samples=len(y))
    assert_array_equal(stream.support_vectors_, whole.support_vectors_)
    assert_array_equal(stream.dual_coef_, whole.dual_coef_)
    assert_array_equal(stream.predict(X), whole.predict(X))
    assert stream.fit_stats_["iterations"] == whole.fit_stats_["iterations"] == 1200
    assert stream.lambda_ == whole.lambda_
    # The stream polished on all its rows is the unpolished fit polished. (A fit with the polish
    # places averaged merges for the last iterate, not for the average: another basis.)
    polished = BudgetSVC(**params, polish=False).fit(X, y)
    polished.polish_coef(X, y)
    stream.polish_coef(X, y)
    assert_array_equal(stream.dual_coef_, polished.dual_coef_)
    assert_array_equal(stream.intercept_, polished.intercept_)


def test_partial_fit_sparse_chunks_equal_dense():
    X, y = xor_data(800, 2)
    dense = BudgetSVC(gamma=2.0, budget=15, shuffle=False, random_state=0)
    sparse = BudgetSVC(gamma=2.0, budget=15, shuffle=False, random_state=0)
    for a in range(0, 800, 200):
        dense.partial_fit(X[a : a + 200], y[a : a + 200], classes=[0, 1])
        sparse.partial_fit(sp.csr_matrix(X[a : a + 200]), y[a : a + 200], classes=[0, 1])
    assert_array_equal(dense.dual_coef_, sparse.dual_coef_)


def test_partial_fit_continues_the_schedule_and_learns():
    X, y = xor_data(6000, 3)
    Xt, yt = xor_data(2000, 4)
    clf = BudgetSVC(lam=1e-4, gamma=2.0, budget=40, random_state=0)
    steps = []
    for a in range(0, 6000, 1000):
        clf.partial_fit(X[a : a + 1000], y[a : a + 1000], classes=[0, 1])
        steps.append(clf.fit_stats_["iterations"])
        assert clf.support_vectors_.shape[0] <= 40
    assert steps == [1000, 2000, 3000, 4000, 5000, 6000]
    assert clf.score(Xt, yt) > 0.93
    assert clf.n_iter_ == 6


def test_partial_fit_shuffles_within_batches_reproducibly():
    X, y = xor_data(600, 5)

    def run(seed):
        clf = BudgetSVC(gamma=2.0, budget=10, random_state=seed)
        for a in range(0, 600, 200):
            clf.partial_fit(X[a : a + 200], y[a : a + 200], classes=[0, 1])
        return clf.dual_coef_

    assert_array_equal(run(1), run(1))
    assert not np.array_equal(run(1), run(2))


@pytest.mark.parametrize("labels", ["int", "str"])
def test_pickle_mid_stream_continues_identically(labels):
    X, y = three_classes(900, 6)
    if labels == "str":
        y = np.array(["a", "b", "c"])[y]
    classes = np.unique(y)
    a = BudgetSVC(gamma=2.0, budget=12, maintenance="project", random_state=0)
    a.partial_fit(X[:300], y[:300], classes=classes)
    assert_pickled_stream_continues_identically(a, X, y, 300, 600)


def test_partial_fit_input_errors():
    X, y = xor_data(100, 7)
    clf = BudgetSVC(gamma=1.0)
    with pytest.raises(ValueError, match="classes must be given"):
        clf.partial_fit(X, y)
    with pytest.raises(ValueError, match="at least two classes"):
        BudgetSVC().partial_fit(X, y, classes=[0])
    with pytest.raises(ValueError, match="not in classes"):
        BudgetSVC().partial_fit(X, y, classes=[0, 5])
    clf.partial_fit(X, y, classes=[0, 1])
    with pytest.raises(ValueError, match="features"):
        clf.partial_fit(X[:, :1], y)
    with pytest.raises(ValueError, match="differs"):
        clf.partial_fit(X, y, classes=[0, 1, 2])
    with pytest.raises(ValueError, match="not in classes"):
        clf.partial_fit(X, y + 3)
    # BSCA has no partial_fit (it keeps a dual variable per training row).
    assert not hasattr(BudgetSVC(solver="bsca"), "partial_fit")
    assert not hasattr(BudgetSVC(solver="bsca"), "fit_file")


def test_partial_fit_after_fit_continues_the_run():
    X, y = xor_data(400, 8)
    clf = BudgetSVC(gamma=2.0, budget=10, epochs=2, random_state=0)
    clf.partial_fit(X, y, classes=[0, 1])
    clf.fit(X, y)  # a new run
    assert clf.fit_stats_["iterations"] == 800
    clf.partial_fit(X[:100], y[:100])
    assert clf.fit_stats_["iterations"] == 900
    again = pickle.loads(
        pickle.dumps(BudgetSVC(gamma=2.0, budget=10, epochs=2, random_state=0).fit(X, y))
    )
    again.partial_fit(X[:100], y[:100])
    assert_array_equal(again.dual_coef_, clf.dual_coef_)
    with pytest.raises(ValueError, match="classes must be given"):
        BudgetSVC().partial_fit(X, y)


# --- training from files --------------------------------------------------------------------------


def write_libsvm(path, X, y, compress=None):
    lines = []
    for row, label in zip(X, y):
        feats = " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(row) if v != 0)
        lines.append(f"{label} {feats}".rstrip())
    text = ("# generated\n" + "\n".join(lines) + "\n").encode()
    opener = {None: open, "gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}[compress]
    with opener(path, "wb") as f:
        f.write(text)
    return path


@pytest.mark.parametrize("compress", [None, "gz", "bz2", "xz"])
@pytest.mark.parametrize("epochs", [1, 3])
def test_file_training_equals_in_memory_training(tmp_path, compress, epochs):
    X, y = three_classes(700, 9)
    X[:, 1] = np.where(np.abs(X[:, 1]) < 0.2, 0.0, X[:, 1])  # some sparsity
    path = write_libsvm(tmp_path / f"train.{compress}", X, y, compress)
    params = dict(
        C=5.0,
        gamma=2.0,
        budget=25,
        epochs=epochs,
        shuffle=False,
        random_state=1,
        multiclass="shared",  # one run (one-vs-one: tests/test_multiclass_streams.py)
    )
    X_mem, y_mem = load_svmlight_file(path)
    in_memory = BudgetSVC(**params).fit(X_mem, y_mem)
    from_file = BudgetSVC(**params).fit_file(path, chunk_rows=64)
    assert_array_equal(from_file.classes_, in_memory.classes_)
    assert_array_equal(from_file.support_vectors_, in_memory.support_vectors_)
    assert_array_equal(from_file.dual_coef_, in_memory.dual_coef_)
    assert from_file.n_features_in_ == 2
    assert from_file.lambda_ == in_memory.lambda_


def test_file_training_gamma_scale_and_shuffle(tmp_path):
    X, y = xor_data(3000, 10)
    path = write_libsvm(tmp_path / "train.svm", X, y)
    X_mem, y_mem = load_svmlight_file(path)
    mem = BudgetSVC(budget=30, random_state=0).fit(X_mem, y_mem)
    progress = []
    clf = BudgetSVC(budget=30, random_state=0, epochs=2).fit_file(
        path, chunk_rows=500, progress=lambda done, total: progress.append((done, total))
    )
    assert clf.gamma_ == pytest.approx(mem.gamma_, rel=1e-9)
    assert progress[-1] == (6000, 6000) and len(progress) == 14  # 3001 lines with the comment
    Xt, yt = xor_data(2000, 11)
    assert clf.score(Xt, yt) > 0.9
    # The run can go on with partial_fit.
    clf.partial_fit(X[:100], y[:100])
    assert clf.fit_stats_["iterations"] == 6100


def test_file_training_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        BudgetSVC().fit_file(tmp_path / "missing.svm")
    one_class = tmp_path / "one.svm"
    one_class.write_text("1 1:0.5\n1 1:0.2\n")
    with pytest.raises(ValueError, match="only one class"):
        BudgetSVC().fit_file(one_class)
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5\n-1 1:0.2\n" * 10 + "1 2:1 1:3\n")
    with pytest.raises(ValueError, match="line 21"):
        BudgetSVC().fit_file(bad, chunk_rows=4)
    empty = tmp_path / "empty.svm"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no data rows"):
        BudgetSVC().fit_file(empty)
    with pytest.raises(ValueError, match="chunk_rows"):
        BudgetSVC().fit_file(bad, chunk_rows=0)
    wide = tmp_path / "wide.svm"
    wide.write_text("1 1:0.5 3:1\n-1 1:0.2\n")
    with pytest.raises(ValueError, match="n_features"):
        BudgetSVC().fit_file(wide, n_features=2)


def test_labels_equal_as_numbers_are_one_class_in_fit_file(tmp_path):
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


def test_fit_file_refuses_pipes_instead_of_blocking(tmp_path):
    # fit_file reads its file once per epoch plus a first pass: a FIFO would block the second
    # open forever, /dev/stdin would give its rows to the first pass only.
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


def test_iter_svmlight_chunks_concatenate_to_the_file(tmp_path):
    X, y = xor_data(250, 12)
    path = write_libsvm(tmp_path / "t.svm.gz", X, y, "gz")
    parts = list(iter_svmlight_chunks(path, chunk_rows=60, n_features=2))
    assert [p[0].shape[0] for p in parts] == [59, 60, 60, 60, 11]  # the comment line is a line
    X_all = sp.vstack([p[0] for p in parts]).toarray()
    X_mem, y_mem = load_svmlight_file(path)
    assert_array_equal(X_all, X_mem.toarray())
    assert_array_equal(np.concatenate([p[1] for p in parts]), y_mem)


def test_readme_streaming_example_runs_as_written(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if ".save(" in b]
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "__main__"}
    exec(compile(blocks[0], "README.md (streaming example)", "exec"), scope)
    clf, same = scope["clf"], scope["same"]
    assert clf.score(scope["X"], scope["y"]) > 0.95
    assert_array_equal(same.predict(scope["X"]), clf.predict(scope["X"]))


def test_broken_state_bytes_raise_value_error():
    from budgetsvm import _budgetsvm

    X, y = xor_data(300, 13)
    clf = BudgetSVC(gamma=2.0, budget=10, random_state=0).partial_fit(X, y, classes=[0, 1])
    data = clf._stream.to_bytes()
    assert _budgetsvm.BsgdStream.from_bytes(data).steps == 300
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        with pytest.raises(ValueError, match="state"):
            _budgetsvm.BsgdStream.from_bytes(data[:cut])
    with pytest.raises(ValueError, match="not a saved BSGD state"):
        _budgetsvm.BsgdStream.from_bytes(b"garbage" * 10)
