"""The command line end to end, through a subprocess: train, predict, evaluate, errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from budgetsvm import BudgetSVC, load_model
from budgetsvm.datasets import load_svmlight_file
from conftest import write_libsvm, xor_data
from numpy.testing import assert_allclose, assert_array_equal

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
A9A = SHARED_DATA / "a9a"


def cli(*args, ok: bool = True):
    r = subprocess.run(
        [sys.executable, "-m", "budgetsvm", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in r.stderr, r.stderr
    if ok:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture
def files(tmp_path):
    X, y = xor_data(2000, 0)
    y = np.where(X[:, 0] > 0.6, 3, y + 1)  # labels 1, 2, 3
    Xt, yt = xor_data(1000, 1)
    yt = np.where(Xt[:, 0] > 0.6, 3, yt + 1)
    return write_libsvm(tmp_path / "train.svm", X, y), write_libsvm(tmp_path / "test.svm", Xt, yt)


def test_train_predict_evaluate_multiclass(files, tmp_path):
    train, test = files
    model = tmp_path / "m.model"
    r = cli("train", "-c", 10, "-g", 4, "-B", 40, "-e", 3, "-s", 1, "-j", 1, train, model)
    assert "model written to" in r.stdout and model.exists()
    out = tmp_path / "pred.txt"
    cli("predict", test, model, out)
    predicted = np.array(out.read_text().split(), dtype=float)
    Xt, yt = load_svmlight_file(test, n_features=2)
    clf = BudgetSVC.load(model)
    assert_array_equal(predicted, clf.predict(Xt))
    assert np.mean(predicted == yt) > 0.85
    assert clf.get_params()["C"] == 10 and clf.budget == 40 and clf.epochs == 3
    r = cli("evaluate", test, model)
    acc = float(r.stdout.split("accuracy:")[1].split("%")[0])
    assert acc == pytest.approx(100 * np.mean(predicted == yt))
    lines = r.stdout.splitlines()
    assert lines[2].split() == ["1", "2", "3"]
    matrix = np.array([line.split()[1:] for line in lines[3:6]], dtype=float)
    assert matrix.sum() == 1000 and np.trace(matrix) == round(acc * 10)
    r = cli("predict", "--values", test, model)  # to stdout
    values = np.array([line.split() for line in r.stdout.splitlines()], dtype=float)
    assert values.shape == (1000, 3)
    assert_array_equal(values, clf.decision_function(Xt))


def test_default_model_path_and_every_solver_option(files, tmp_path, monkeypatch):
    train, test = files
    monkeypatch.chdir(tmp_path)
    cli("train", "-q", "-A", "bsca", "-m", "project", "-B", 30, "-e", 1, "-g", "auto", train)
    assert (tmp_path / "train.svm.model").exists()
    clf = BudgetSVC.load(tmp_path / "train.svm.model")
    assert clf.solver == "bsca" and clf.maintenance == "project"
    for extra in (["-M", "gss"], ["-m", "remove", "--no-average"], ["-L", "1e-3", "--no-shuffle"]):
        cli("train", "-q", "-B", 20, "-e", 1, *extra, train, tmp_path / "x.model")
    assert BudgetSVC.load(tmp_path / "x.model").lam == 1e-3


@pytest.mark.parametrize("multiclass", ["shared", "ovo"])
def test_stream_training_equals_in_memory(files, tmp_path, multiclass):
    train, test = files
    # --stream trains as in memory for either design of several classes (one-vs-one: each pair
    # on its two classes' rows, fit_file polishing each pair on its rows of the file).
    common = ["-g", 4, "-B", 30, "-e", 2, "--no-shuffle", "--multiclass", multiclass]
    cli("train", "-q", *common, train, tmp_path / "mem.model")
    r = cli("train", *common, "--stream", "--chunk-rows", 300, train, tmp_path / "stream.model")
    assert "2,000 rows" in r.stdout
    a, b = BudgetSVC.load(tmp_path / "mem.model"), BudgetSVC.load(tmp_path / "stream.model")
    assert a.multiclass_ == b.multiclass_ == multiclass
    assert_array_equal(a.support_vectors_, b.support_vectors_)
    # (One-vs-one's first pair probes the Hessian-free polish, whose sums follow the chunks.)
    assert_allclose(a.dual_coef_, b.dual_coef_, rtol=1e-9, atol=1e-12)


def test_progress_bar_goes_to_stderr(files, tmp_path):
    train, _ = files
    r = cli("train", "--progress", "-B", 20, "-e", 2, train, tmp_path / "m")
    assert "training [" in r.stderr and "100.0%" in r.stderr
    assert "training [" not in r.stdout
    r = cli("train", "--progress", "--stream", "--chunk-rows", 500, "-B", 20, train, tmp_path / "m")
    assert "10,000/10,000 rows" in r.stderr  # 5 epochs (the default) of 2,000 rows


@pytest.mark.skipif(not A9A.exists(), reason="../shared/data/a9a not available")
def test_a9a_end_to_end(tmp_path):
    model = tmp_path / "a9a.model"
    cli("train", "-c", 32, "-g", 0.0078125, "-B", 100, "-e", 5, A9A / "a9a.xz", model)
    r = cli("evaluate", A9A / "a9a.t.xz", model)
    acc = float(r.stdout.split("accuracy:")[1].split("%")[0])
    assert 82.0 < acc < 87.0  # around paper 000's a9a row (docs/bsgd_paper000.md)
    assert "(" in r.stdout and "16,281)" in r.stdout
    r = cli("predict", A9A / "a9a.t.xz", model, "-", "--chunk-rows", 5000)
    assert len(r.stdout.split()) == 16281
    assert set(r.stdout.split()) <= {"-1", "1"}
    cli("train", "--stream", "-L", 1e-4, "-g", 0.0078125, "-B", 50, "-e", 1, A9A / "a9a.xz", model)


def test_errors_are_one_line_with_exit_codes(files, tmp_path):
    train, test = files
    model = tmp_path / "m"
    cli("train", "-q", "-B", 10, "-e", 1, train, model)

    def error(status, *args):
        r = cli(*args, ok=False)
        assert r.returncode == status, (args, r.returncode, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "error" in lines[0], r.stderr
        return lines[0]

    assert "invalid float" in error(2, "train", "-c", "x", train)
    assert "C must be" in error(2, "train", "-c", "-1", train)
    assert "budget" in error(2, "train", "-B", "1", train)
    assert "gamma" in error(2, "train", "-g", "wide", train)
    assert "unrecognized" in error(2, "train", "--nope", train)
    assert "invalid choice" in error(2, "train", "-A", "sgd", train)
    assert "BSGD only" in error(2, "train", "--stream", "-A", "bsca", train)
    assert "chunk-rows" in error(2, "predict", "--chunk-rows", "0", test, model)
    assert "No such file" in error(3, "train", tmp_path / "missing.svm")
    assert "No such file" in error(3, "predict", test, tmp_path / "missing.model")
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5\n2 1:x\n")
    assert "line 2" in error(1, "train", bad)
    assert "line 2" in error(1, "train", "--stream", bad)
    assert "line 2" in error(1, "predict", bad, model)
    assert "not a budgetsvm model file" in error(1, "predict", test, train)
    corrupted = tmp_path / "corrupted"
    corrupted.write_bytes(model.read_bytes()[:-20])
    assert "truncated or corrupted" in error(1, "evaluate", test, corrupted)
    one = tmp_path / "one.svm"
    one.write_text("1 1:0.5\n1 1:0.7\n")
    assert "one class" in error(1, "train", one)
    wide = tmp_path / "wide.svm"
    wide.write_text("1 1:0.5 5:1\n")
    assert "n_features" in error(1, "predict", wide, model)
    assert "cannot write" in error(3, "predict", test, model, tmp_path / "no" / "dir" / "out")
    # Every bad value of a parameter is a usage error (2), found before the file is read.
    for gamma, solver in (("-1", "bsgd"), ("0", "bsca"), ("nan", "smo"), ("inf", "bsgd")):
        assert "gamma must be" in error(2, "train", "-g", gamma, "-A", solver, train)
    assert "budget must be an integer below 2**63" in error(2, "train", "-B", 10**20, train)
    assert "epochs must be an integer below 2**63" in error(2, "train", "-e", 10**20, train)
    assert "C must be" in error(2, "train", "-c", "1e400", train)
    # A directory is no data file: an I/O error naming it, never "a pipe or device".
    folder = tmp_path / "folder"
    folder.mkdir()
    for args in (("train",), ("train", "--stream"), ("predict",)):
        line = error(3, *args, folder, *((model,) if args == ("predict",) else ()))
        assert "folder" in line and "directory" in line.lower() and "pipe" not in line, line


def test_help_has_examples_and_exit_codes():
    r = cli("--help")
    assert "exit status" in r.stdout and "budgetsvm train" in r.stdout
    for command in ("train", "predict", "evaluate"):
        r = cli(command, "--help")
        assert "examples:" in r.stdout and "exit status" in r.stdout
    r = cli("train", "--help")
    for flag in ("-c", "-L", "-g", "-B", "-A", "-e", "-m", "-M", "-s", "-j", "--stream"):
        assert f" {flag}" in r.stdout
    r = cli(ok=False)
    assert r.returncode == 2


def test_demo_still_runs():
    r = cli("demo", "-B", 20, "-e", 1)
    assert "lookup-wd" in r.stdout and "gss" in r.stdout


@pytest.fixture
def regression_files(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(900, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.05 * rng.normal(size=900)
    return (
        write_libsvm(tmp_path / "reg.train", X[:600], y[:600]),
        write_libsvm(tmp_path / "reg.test", X[600:], y[600:]),
    )


def r2_of(r):
    return float(r.stdout.split("R^2:")[1].split()[0])


@pytest.mark.parametrize(
    "solver, options, kind",
    [
        ("bsca", ["-B", 60], "BudgetSVR"),
        ("bsgd", ["-B", 60, "-e", 10], "BudgetSVR"),
        ("alfpgm", [], "KernelSVR"),
        ("smo", ["-k", "poly", "-d", 2, "-r", 1, "--tol", 1e-4], "KernelSVR"),
    ],
)
def test_train_regression_every_solver(regression_files, tmp_path, solver, options, kind):
    train, test = regression_files
    model = tmp_path / "reg.model"
    r = cli(
        "train",
        "-T",
        "regression",
        "-A",
        solver,
        "-c",
        10,
        "-g",
        0.5,
        "-p",
        0.05,
        *options,
        train,
        model,
    )
    assert "regression" in r.stdout and solver.upper() in r.stdout
    clf = load_model(model)
    assert type(clf).__name__ == kind
    assert clf.epsilon == 0.05 and clf.C == 10
    Xt, yt = load_svmlight_file(test, n_features=3)
    out = tmp_path / "pred.txt"
    cli("predict", test, model, out)
    assert_array_equal(np.array(out.read_text().split(), dtype=float), clf.predict(Xt))
    r = cli("evaluate", test, model)
    assert r2_of(r) == pytest.approx(clf.score(Xt, yt), abs=1e-6)
    assert r2_of(r) > 0.8


def test_train_regression_stream_equals_in_memory(regression_files, tmp_path):
    train, _ = regression_files
    common = ["-q", "-T", "regression", "-A", "bsgd", "-g", 0.5, "-B", 30, "-e", 2, "--no-shuffle"]
    cli("train", *common, train, tmp_path / "mem.model")
    cli("train", *common, "--stream", "--chunk-rows", 100, train, tmp_path / "stream.model")
    a, b = load_model(tmp_path / "mem.model"), load_model(tmp_path / "stream.model")
    assert_array_equal(a.support_vectors_, b.support_vectors_)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=1e-12, atol=1e-12)


def test_train_exact_classifier_with_each_kernel(files, tmp_path):
    from budgetsvm import KernelSVC

    train, test = files
    X, y = load_svmlight_file(train, n_features=2)
    Xt, yt = load_svmlight_file(test, n_features=2)
    for kernel in ("rbf", "linear", "poly", "sigmoid"):
        model = tmp_path / f"{kernel}.model"
        r = cli(
            "train",
            "-A",
            "smo",
            "-k",
            kernel,
            "-g",
            2,
            "-c",
            3,
            "-d",
            2,
            "-r",
            0.5,
            "--cache-size",
            10,
            train,
            model,
        )
        assert f"kernel {kernel}" in r.stdout
        clf = KernelSVC.load(model)
        direct = KernelSVC(
            C=3,
            kernel=kernel,
            gamma=2.0,
            degree=2,
            coef0=0.5,
            solver="smo",
            cache_size=10,
            random_state=0,
        ).fit(X, y)
        assert_array_equal(clf.predict(Xt), direct.predict(Xt))
        r = cli("predict", "-d", test, model)
        values = np.array([line.split() for line in r.stdout.splitlines()], dtype=float)
        assert_array_equal(values, direct.decision_function(Xt))
        r = cli("evaluate", test, model)
        acc = float(r.stdout.split("accuracy:")[1].split("%")[0])
        assert acc == pytest.approx(100 * direct.score(Xt, yt), abs=1e-3)


def test_train_novelty_detector(tmp_path):
    from budgetsvm import KernelOneClassSVM

    rng = np.random.default_rng(5)
    X = rng.normal(size=(800, 2))
    y = np.where(np.linalg.norm(X, axis=1) > 2.2, -1, 1)
    data = write_libsvm(tmp_path / "nov.svm", X, y)
    model = tmp_path / "nov.model"
    r = cli("train", "-T", "novelty", "-n", 0.05, "-g", 0.5, data, model)
    assert "novelty detection" in r.stdout
    det = KernelOneClassSVM.load(model)
    assert det.nu == 0.05 and det.solver == "alfpgm"
    direct = KernelOneClassSVM(nu=0.05, gamma=0.5).fit(X)
    assert_array_equal(det.predict(X), direct.predict(X))
    r = cli("predict", data, model)
    assert_array_equal(np.array(r.stdout.split(), dtype=int), direct.predict(X))
    r = cli("evaluate", data, model)
    lines = r.stdout.splitlines()
    assert lines[2].split() == ["-1", "1"]
    acc = float(lines[0].split("accuracy:")[1].split("%")[0])
    assert acc == pytest.approx(100 * np.mean(direct.predict(X) == y), abs=1e-3)
    r = cli("predict", "--values", data, model)
    assert_array_equal(np.array(r.stdout.split(), dtype=float), direct.decision_function(X))


def test_train_nu_machines(files, tmp_path):
    from budgetsvm import KernelNuSVC, KernelNuSVR

    train, test = files
    X, y = load_svmlight_file(train, n_features=2)
    Xt, _ = load_svmlight_file(test, n_features=2)
    model = tmp_path / "nu.model"
    r = cli("train", "-A", "smo", "--nu-svm", "-n", 0.3, "-g", 2, train, model)
    clf = KernelNuSVC.load(model)
    assert type(clf) is KernelNuSVC and clf.nu == 0.3
    direct = KernelNuSVC(nu=0.3, gamma=2.0, solver="smo", random_state=0).fit(X, y)
    assert_array_equal(clf.predict(Xt), direct.predict(Xt))
    r = cli("predict", "-d", test, model)
    values = np.array([line.split() for line in r.stdout.splitlines()], dtype=float)
    assert_array_equal(values, direct.decision_function(Xt))
    z = X.toarray()[:, 0] - X.toarray()[:, 1]
    data = write_libsvm(tmp_path / "reg.svm", X.toarray(), z)
    cli("train", "-T", "regression", "-A", "alfpgm", "--nu-svm", "-n", 0.4, "-c", 2, data, model)
    reg = KernelNuSVR.load(model)
    assert type(reg) is KernelNuSVR and reg.nu == 0.4 and reg.C == 2
    assert_array_equal(reg.predict(Xt), KernelNuSVR(nu=0.4, C=2.0).fit(X, z).predict(Xt))


def test_train_precomputed_kernel(tmp_path):
    from budgetsvm import KernelSVR

    rng = np.random.default_rng(6)
    X = rng.normal(size=(120, 3))
    y = X[:, 0] - X[:, 1] ** 2
    K = (X @ X.T + 1.0) ** 2
    data = write_libsvm(tmp_path / "gram.svm", K, y)
    model = tmp_path / "gram.model"
    cli("train", "-T", "regression", "-A", "smo", "-k", "precomputed", "-c", 5, data, model)
    direct = KernelSVR(kernel="precomputed", C=5, solver="smo").fit(K, y)
    loaded = KernelSVR.load(model)
    assert_array_equal(loaded.support_, direct.support_)
    r = cli("predict", data, model)
    np.testing.assert_allclose(np.array(r.stdout.split(), dtype=float), direct.predict(K))
    wide = write_libsvm(tmp_path / "wide.svm", np.hstack([K, K[:, :1]]), y)
    r = cli("train", "-T", "regression", "-A", "smo", "-k", "precomputed", wide, model, ok=False)
    assert r.returncode == 1 and "one column per training row" in r.stderr


def test_train_option_errors(files, tmp_path):
    train, _ = files
    model = tmp_path / "m"

    def error(*args):
        r = cli("train", *args, train, model, ok=False)
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        return r.stderr

    assert "novelty detection is exact only" in error("-T", "novelty", "-A", "bsgd")
    assert "Gaussian (rbf) kernels only" in error("-k", "poly")
    assert "-B/--budget, --no-polish: only the budgeted" in error(
        "-A", "smo", "-B", 10, "--no-polish"
    )
    assert "epsilon" in error("-T", "regression", "-p", -1)
    assert "epsilon" in error("-T", "regression", "-A", "alfpgm", "-p", -1)
    assert "nu" in error("-T", "novelty", "-n", 1.5)
    assert "nu must be in (0, 1]" in error("-A", "smo", "--nu-svm", "-n", 0)
    assert "--nu-svm is exact only" in error("--nu-svm")
    assert "tol" in error("-A", "alfpgm", "--tol", 0)
    assert "degree" in error("-A", "smo", "-k", "poly", "-d", -2)
    assert "cache_size" in error("-A", "smo", "--cache-size", -5)
    assert "invalid choice" in error("-k", "laplacian")
    assert "invalid choice" in error("-T", "ranking")
    assert not model.exists()


def test_train_with_budget_auto(files, tmp_path):
    train, test = files
    model = tmp_path / "auto.model"
    cli("train", "-q", "-c", 10, "-g", 4, "-B", "auto", "-e", 1, "-s", 1, train, model)
    clf = BudgetSVC.load(model)
    assert clf.budget == "auto"
    assert clf.budget_ == clf.fit_stats_["budget_search"]["budget"]
    for bad, says in (("-B x", "integer or 'auto'"), ("--stream -B auto", "--stream needs")):
        r = cli("train", "-q", *bad.split(), train, tmp_path / "bad.model", ok=False)
        assert r.returncode != 0 and says in r.stderr


def test_train_search_writes_the_refitted_model(files, tmp_path):
    train, test = files
    model = tmp_path / "search.model"
    r = cli(
        "train",
        "--search",
        "--Cs",
        "1,10",
        "--gammas",
        "2,scale",
        "--folds",
        2,
        "-e",
        1,
        "-s",
        3,
        "--progress",
        train,
        model,
    )
    assert "search: 4 points, 2 folds; best C" in r.stdout and "budget" in r.stdout
    assert "fits" in r.stderr  # the bar counts the search's fits
    clf = BudgetSVC.load(model)
    assert clf.C in (1, 10) and clf.budget == clf.budget_
    exact = tmp_path / "exact.model"
    r = cli("train", "-q", "--search", "-A", "smo", "--Cs", "1", "--gammas", "1,4", train, exact)
    assert load_model(exact).gamma in (1.0, 4.0)
    for bad, says in (
        ("--search --stream", "--search cross-validates"),
        ("--search --folds 1", "--folds"),
        ("--Cs 1,2", "grid of --search"),
        ("--search --Cs 1,x", "comma-separated numbers"),
    ):
        r = cli("train", "-q", *bad.split(), train, tmp_path / "bad.model", ok=False)
        assert r.returncode != 0 and says in r.stderr


def test_train_and_predict_refuse_to_overwrite_their_inputs(tmp_path):
    X, y = xor_data(200, 7)
    train = write_libsvm(tmp_path / "t.svm", X, y)
    original = train.read_bytes()
    r = cli("train", "-q", train, train, ok=False)
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    assert train.read_bytes() == original
    model = tmp_path / "m.model"
    cli("train", "-q", "-g", 1, train, model)
    r = cli("predict", train, model, train, ok=False)
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    assert train.read_bytes() == original
