"""Model files: round trips for every solver and label type, and every broken-file case."""

from __future__ import annotations

import io
import json
import pickle
import zipfile

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from budgetsvm import BudgetSVC, ModelFormatError, load_model, save_model
from budgetsvm.modelfile import FORMAT_VERSION
from conftest import array_edit, flip_bits_and_load, header_edit, rewrite, xor_data
from numpy.testing import assert_array_equal
from sklearn.exceptions import NotFittedError


def data(n_classes: int, labels: str, seed: int = 0):
    X, y = xor_data(600, seed)
    if n_classes == 3:
        y = np.where(X[:, 0] > 0.5, 2, y)
    names = {
        "int": np.array([-1, 1, 7]),
        "str": np.array(["black", "white", "grey"]),
        "float": np.array([-1.0, 1.0, 2.0]),  # integral floats (LIBSVM labels)
    }[labels]
    return X, names[y]


@pytest.mark.parametrize("solver", ["bsgd", "bsca"])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("labels", ["int", "str", "float"])
def test_round_trip_gives_identical_predictions(tmp_path, solver, n_classes, labels):
    X, y = data(n_classes, labels)
    clf = BudgetSVC(solver=solver, gamma=2.0, budget=20, epochs=2, random_state=0).fit(X, y)
    path = tmp_path / "model.bsvm"
    clf.save(path)
    loaded = BudgetSVC.load(path)
    assert_array_equal(loaded.predict(X), clf.predict(X))
    assert_array_equal(loaded.decision_function(X), clf.decision_function(X))
    assert_array_equal(loaded.classes_, clf.classes_)
    assert loaded.classes_.dtype == clf.classes_.dtype
    assert loaded.get_params() == clf.get_params()
    assert loaded.fit_stats_["iterations"] == clf.fit_stats_["iterations"]
    assert loaded.gamma_ == clf.gamma_
    # Sparse input predicts the same through a loaded model.
    assert_array_equal(loaded.predict(sp.csr_matrix(X)), clf.predict(X))


def test_module_functions_feature_names_and_bool_labels(tmp_path):
    X, y = xor_data(300, 1)
    frame = pd.DataFrame(X, columns=["a", "b"])
    clf = BudgetSVC(gamma=2.0, budget=10, random_state=0).fit(frame, y.astype(bool))
    save_model(clf, tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert_array_equal(loaded.feature_names_in_, ["a", "b"])
    assert_array_equal(loaded.predict(frame), clf.predict(frame))
    assert loaded.classes_.dtype == bool
    # The loaded model pickles too.
    assert_array_equal(pickle.loads(pickle.dumps(loaded)).predict(frame), clf.predict(frame))


def test_header_is_documented_json(tmp_path):
    X, y = xor_data(300, 2)
    clf = BudgetSVC(gamma=2.0, budget=10, random_state=0, lam=1e-3).fit(X, y)
    clf.save(tmp_path / "m")
    with zipfile.ZipFile(tmp_path / "m") as z:
        assert sorted(z.namelist()) == ["dual_coef.npy", "header.json", "support_vectors.npy"]
        header = json.loads(z.read("header.json"))
    # A polished model has an intercept: version 3.
    assert header["format"] == "budgetsvm-model" and header["version"] == 3
    assert header["intercept"] == clf.intercept_.tolist()
    assert header["kernel"] == {"name": "rbf", "gamma": 2.0}
    assert header["classes"] == {"dtype": "<i8", "values": [0, 1]}
    assert header["params"]["budget"] == 10 and header["lambda"] == 1e-3
    assert header["arrays"]["dual_coef"] == [1, clf.support_vectors_.shape[0]]


def test_unfitted_and_unsavable(tmp_path):
    with pytest.raises(NotFittedError):
        BudgetSVC().save(tmp_path / "m")
    X, y = xor_data(200, 3)
    clf = BudgetSVC(gamma=2.0, random_state=0).fit(X, y)
    clf.classes_ = np.empty(2, dtype=object)
    clf.classes_[:] = [(1,), (2, 3)]  # labels no model file can hold
    with pytest.raises(ValueError, match="cannot save class labels"):
        clf.save(tmp_path / "m")


def test_save_model_of_a_foreign_estimator_says_what_to_do(tmp_path):
    from sklearn.svm import SVC

    X, y = xor_data(100, 12)
    with pytest.raises(TypeError, match="model files hold BudgetSVC, .*KernelSVC.*not SVC.*pickle"):
        save_model(SVC().fit(X, y), tmp_path / "k.model")
    assert not (tmp_path / "k.model").exists()


@pytest.fixture
def saved(tmp_path):
    X, y = data(3, "str")
    clf = BudgetSVC(gamma=2.0, budget=15, random_state=0).fit(X, y)
    path = tmp_path / "good.bsvm"
    clf.save(path)
    return path


def test_truncated_file(saved, tmp_path):
    raw = saved.read_bytes()
    for cut in [len(raw) - 1, len(raw) // 2, 10, 2]:
        (tmp_path / "t").write_bytes(raw[:cut])
        with pytest.raises(ModelFormatError, match="truncated or corrupted"):
            load_model(tmp_path / "t")


def test_corrupted_file(saved, tmp_path):
    flip_bits_and_load(saved, tmp_path, flips=300, seed=0, X=np.zeros((1, 2)))
    # A flipped byte inside the compressed support vectors: the zip's checks catch it.
    with zipfile.ZipFile(saved) as z:
        info = z.getinfo("support_vectors.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    b = bytearray(saved.read_bytes())
    b[start + info.compress_size // 2] ^= 0xFF
    (tmp_path / "crc").write_bytes(bytes(b))
    with pytest.raises(ModelFormatError, match="corrupted"):
        load_model(tmp_path / "crc")


def test_inconsistent_contents_are_corrupted(saved, tmp_path):
    cases = {
        "shape": lambda h: h["arrays"].update(support_vectors=[3, 2]),
        "classes": lambda h: h["classes"].update(values=["a"]),
        "dtype": lambda h: h["classes"].update(dtype="|O"),
        # An 882-byte file once made load allocate 6.8 GB for these labels.
        "wide labels": lambda h: h["classes"].update(dtype="<U250000000"),
        "wide numbers": lambda h: h["classes"].update(dtype="<V100000000"),
        "probabilities": lambda h: h.update(probability={"A": [1.0, 2.0], "B": [0.0]}),
        "class weights": lambda h: h.update(class_weight=[1.0, float("nan")]),
        "gamma": lambda h: h["kernel"].update(gamma=-1),
        "missing": lambda h: h.pop("arrays"),
    }
    for name, edit in cases.items():
        path = rewrite(saved, tmp_path / name, header_edit(edit))
        with pytest.raises(ModelFormatError, match="corrupted"):
            load_model(path)

    def pickled_array(name, data):
        if name == "dual_coef.npy":
            buf = io.BytesIO()
            np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
            return buf.getvalue()
        return data

    with pytest.raises(ModelFormatError, match="corrupted"):
        load_model(rewrite(saved, tmp_path / "pickled", pickled_array))

    def nan_first(a):
        a[0, 0] = np.nan

    with pytest.raises(ModelFormatError, match="NaN"):
        load_model(rewrite(saved, tmp_path / "nan", array_edit("support_vectors.npy", nan_first)))
    dropped = rewrite(saved, tmp_path / "dropped", lambda n, d: None if n == "dual_coef.npy" else d)
    with pytest.raises(ModelFormatError, match="corrupted"):
        load_model(dropped)


def test_foreign_files(saved, tmp_path):
    (tmp_path / "text").write_text("1 1:0.5\n")
    with pytest.raises(ModelFormatError, match="not a budgetsvm model file"):
        load_model(tmp_path / "text")
    (tmp_path / "pickle").write_bytes(pickle.dumps(BudgetSVC()))
    with pytest.raises(ModelFormatError, match="not a budgetsvm model file"):
        load_model(tmp_path / "pickle")
    np.savez(tmp_path / "arrays.npz", a=np.zeros(3))
    with pytest.raises(ModelFormatError, match="no header.json"):
        load_model(tmp_path / "arrays.npz")
    other = rewrite(
        saved,
        tmp_path / "other",
        lambda n, d: (
            json.dumps({"format": "something-else", "version": 1}).encode()
            if n == "header.json"
            else d
        ),
    )
    with pytest.raises(ModelFormatError, match="not a budgetsvm model file"):
        load_model(other)
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ModelFormatError):
        load_model(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing")


def test_newer_version(saved, tmp_path):
    newer = FORMAT_VERSION + 1
    bump = header_edit(lambda h: h.update(version=newer))
    with pytest.raises(ModelFormatError, match=f"newer budgetsvm.*version {newer}"):
        load_model(rewrite(saved, tmp_path / "newer", bump))
    assert issubclass(ModelFormatError, ValueError)


def test_pickle_still_works_for_both_solvers():
    X, y = data(3, "str")
    for solver in ("bsgd", "bsca"):
        clf = BudgetSVC(solver=solver, gamma=2.0, budget=15, random_state=0).fit(X, y)
        assert_array_equal(pickle.loads(pickle.dumps(clf)).predict(X), clf.predict(X))
