"""budgetsvm.dask against a real local Dask cluster (distributed.LocalCluster)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from budgetsvm import BudgetSVC
from conftest import local_dask_client, xor_data
from numpy.testing import assert_array_equal

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")
import dask.array as da  # noqa: E402
import dask.dataframe as dd  # noqa: E402
from budgetsvm import dask as bdask  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def client():
    with local_dask_client(n_workers=1, threads_per_worker=2) as c:
        yield c


def three_classes(n, seed):
    X, y = xor_data(n, seed)
    return X, np.where(X[:, 0] > 0.6, 2, y)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_predictions_on_dask_arrays_and_frames(client, n_classes):
    X, y = xor_data(3000, 0) if n_classes == 2 else three_classes(3000, 0)
    labels = np.array(["a", "b", "c"])[y]
    clf = BudgetSVC(gamma=2.0, budget=30, random_state=0).fit(X, labels)
    dX = da.from_array(X, chunks=(700, 1))  # column chunks are merged
    pred = bdask.predict(clf, dX)
    assert pred.chunks == ((700, 700, 700, 700, 200),)
    assert_array_equal(pred.compute(), clf.predict(X))
    values = bdask.decision_function(clf, dX).compute()
    assert_array_equal(values, clf.decision_function(X))
    frame = dd.from_pandas(pd.DataFrame(X, columns=["u", "v"]), npartitions=4)
    s = bdask.predict(clf, frame).compute()
    assert_array_equal(s.to_numpy(), clf.predict(X))
    assert_array_equal(s.index, np.arange(3000))
    d = bdask.decision_function(clf, frame).compute()
    assert_array_equal(np.asarray(d), clf.decision_function(X))


def test_frame_fitted_with_column_names(client):
    X, y = xor_data(1000, 1)
    frame = pd.DataFrame(X, columns=["u", "v"])
    clf = BudgetSVC(gamma=2.0, budget=20, random_state=0).fit(frame, y)
    pred = bdask.predict(clf, dd.from_pandas(frame, npartitions=3)).compute()
    assert_array_equal(pred.to_numpy(), clf.predict(frame))


def test_fit_incremental_equals_partial_fit_over_the_same_chunks(client):
    X, y = three_classes(4000, 2)
    params = dict(gamma=2.0, budget=25, random_state=0, shuffle=False)
    local = BudgetSVC(**params)
    for a in range(0, 4000, 1000):
        local.partial_fit(X[a : a + 1000], y[a : a + 1000], classes=[0, 1, 2], n_samples=4000)
    dX, dy = da.from_array(X, chunks=(1000, 2)), da.from_array(y, chunks=500)
    remote = bdask.fit_incremental(BudgetSVC(**params), dX, dy, classes=[0, 1, 2], n_samples=4000)
    assert_array_equal(remote.dual_coef_, local.dual_coef_)
    # Dataframes: partitions in order, y a Series partitioned alike.
    frame = dd.from_pandas(pd.DataFrame(X, columns=["u", "v"]), npartitions=4)
    target = dd.from_pandas(pd.Series(y), npartitions=4)
    framed = bdask.fit_incremental(BudgetSVC(**params), frame, target, classes=[0, 1, 2])
    assert framed.fit_stats_["iterations"] == 4000
    assert_array_equal(framed.feature_names_in_, ["u", "v"])
    Xt, yt = three_classes(2000, 3)
    assert framed.score(pd.DataFrame(Xt, columns=["u", "v"]), yt) > 0.85
    # More epochs continue the same run.
    again = bdask.fit_incremental(BudgetSVC(**params), dX, dy, classes=[0, 1, 2], epochs=2)
    assert again.fit_stats_["iterations"] == 8000


def test_errors(client):
    X, y = xor_data(100, 4)
    dX, dy = da.from_array(X, chunks=50), da.from_array(y, chunks=50)
    with pytest.raises(TypeError, match="dask array or dask dataframe"):
        bdask.predict(BudgetSVC().fit(X, y), X)
    with pytest.raises(ValueError, match="partial_fit"):
        bdask.fit_incremental(BudgetSVC(solver="bsca"), dX, dy, classes=[0, 1])
    with pytest.raises(ValueError, match="classes must be given"):
        bdask.fit_incremental(BudgetSVC(), dX, dy)
    with pytest.raises(ValueError, match="rows"):
        bdask.fit_incremental(BudgetSVC(), dX, dy[:60], classes=[0, 1])
    with pytest.raises(ValueError, match="epochs"):
        bdask.fit_incremental(BudgetSVC(), dX, dy, classes=[0, 1], epochs=0)


def test_readme_dask_example_runs_as_written(tmp_path):
    """The README's Dask example, verbatim, in a fresh interpreter (it starts its own
    LocalCluster with worker processes)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    example = [b for b in blocks if "budgetsvm.dask" in b]
    assert len(example) == 1
    script = tmp_path / "readme_dask_example.py"
    script.write_text(example[0])
    r = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    accuracy = float(r.stdout.split("checkerboard accuracy:")[1])
    assert accuracy > 0.95


@pytest.mark.parametrize("n_classes", [2, 3])
def test_zero_row_blocks_and_partitions(client, n_classes):
    X, y = xor_data(1000, 3) if n_classes == 2 else three_classes(1000, 3)
    clf = BudgetSVC(gamma=2.0, budget=20, epochs=1, random_state=0).fit(X, y)
    dX = da.from_array(X, chunks=((500, 0, 500), (2,)))  # an empty block in the middle
    assert_array_equal(bdask.predict(clf, dX).compute(), clf.predict(X))
    assert_array_equal(bdask.decision_function(clf, dX).compute(), clf.decision_function(X))
    frame = dd.from_pandas(pd.DataFrame(X, columns=["u", "v"]), npartitions=4)
    filtered = frame[frame["u"] > 2.0]  # every partition empty
    assert len(bdask.predict(clf, filtered).compute()) == 0
    assert len(bdask.decision_function(clf, filtered).compute()) == 0
