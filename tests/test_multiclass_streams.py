"""One-vs-one beyond ``fit``: a ``partial_fit`` stream started on an unfitted estimator and
``fit_file`` train one BSGD run per class pair on the rows of its two classes (the model laid out
as ``fit``'s one-vs-one). Checked against independent paths: each pair against the binary
BudgetSVC stream or file on that pair's rows, the whole model against ``fit``."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import BudgetSVC, _one_vs_one, load_model
from budgetsvm._budgeted import file_summary
from budgetsvm._one_vs_one import PolishMethodProbe, pair_budgets, pair_seed
from budgetsvm.datasets import load_svmlight_file
from conftest import assert_pickled_stream_continues_identically, write_libsvm
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

# 'ovo' asked for ('auto' takes it from 500 SVs per pair: test_auto_follows_fit_s_rule).
KW = dict(C=1.0, gamma=0.5, random_state=0, multiclass="ovo")
BATCHES = [(0, 250), (250, 251), (251, 700), (700, 1200)]


def blobs(n: int, k: int, seed: int, scale: float = 2.5) -> tuple:
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=scale, size=(k, 3))
    y = rng.integers(0, k, n)
    return centers[y] + rng.normal(size=(n, 3)), y


def pair_groups(clf: BudgetSVC) -> list:
    starts = np.r_[0, np.cumsum(clf.n_support_per_pair_)]
    return [slice(starts[p], starts[p + 1]) for p in range(len(clf.n_support_per_pair_))]


def dense(a):
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def stream(clf: BudgetSVC, X, y, classes, n_samples=None, weights=None):
    for a, b in BATCHES:
        w = None if weights is None else weights[a:b]
        clf.partial_fit(X[a:b], y[a:b], classes=classes, sample_weight=w, n_samples=n_samples)
    return clf


# --- partial_fit on an unfitted estimator ----------------------------------------------------------


@pytest.mark.parametrize("multiclass", ["auto", "ovo", "shared"])
def test_a_stream_of_two_classes_is_the_binary_stream(multiclass):
    X, y = blobs(1200, 2, 0)
    kw = dict(KW, multiclass=multiclass)
    clf = stream(BudgetSVC(budget=30, **kw), X, y, [0, 1])
    binary = stream(BudgetSVC(budget=30, **dict(KW, multiclass="shared")), X, y, [0, 1])
    assert clf.multiclass_ == "binary" and clf.n_support_per_pair_ is None
    assert_array_equal(clf.support_vectors_, binary.support_vectors_)
    assert_array_equal(clf.dual_coef_, binary.dual_coef_)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_each_pair_of_a_stream_is_the_binary_stream_on_its_rows(shuffle, sparse):
    # Pair p of classes (a, b): the binary BudgetSVC stream of the batches' rows of a and b (in
    # their order), with its equal share of the budget, its own seed, and 2 / n_classes of the
    # stream's rows as its n_samples. Bit for bit, whatever the batches hold (the batch of one
    # row gives most pairs nothing), with weights and string labels.
    X, y = blobs(1200, 4, 1)
    labels = np.array(["w", "x", "y", "z"])[y]
    rows = sp.csr_matrix(X) if sparse else X
    weights = np.random.default_rng(2).uniform(0.2, 2.0, len(y))
    weights[::7] = 0.0  # left out of their pairs
    kw = dict(KW, shuffle=shuffle, class_weight={"y": 2.0})
    clf = stream(BudgetSVC(budget=100, **kw), rows, labels, list("zyxw"), 1200, weights)
    assert clf.multiclass_ == "ovo" and len(clf.n_support_per_pair_) == 6
    budgets = pair_budgets(100, [1] * 6)
    assert budgets == [17, 17, 17, 17, 16, 16]
    assert [p["budget"] for p in clf.fit_stats_["pairs"]] == budgets
    assert clf.support_vectors_.shape[0] <= 100
    for p, ((a, b), group) in enumerate(zip(itertools.combinations("wxyz", 2), pair_groups(clf))):
        own = {c: w for c, w in kw["class_weight"].items() if c in (a, b)}
        binary = BudgetSVC(
            budget=budgets[p], **dict(kw, random_state=pair_seed(0, p), class_weight=own)
        )
        started = False
        seen = 0
        for lo, hi in BATCHES:
            keep = np.flatnonzero(np.isin(labels[lo:hi], [a, b]) & (weights[lo:hi] > 0)) + lo
            if len(keep) == 0:
                continue
            binary.partial_fit(
                rows[keep],
                labels[keep],
                classes=[a, b],
                sample_weight=weights[keep],
                n_samples=None if started else 600,  # 2 / 4 of the stream's 1,200 rows
            )
            started = True
            seen += len(keep)
        assert clf.n_support_per_pair_[p] <= budgets[p]
        assert_array_equal(dense(clf.support_vectors_[group]), dense(binary.support_vectors_))
        assert_array_equal(clf.dual_coef_[0, group], -binary.dual_coef_[0])
        assert clf.fit_stats_["pairs"][p]["rows"] == seen
        assert clf.fit_stats_["pairs"][p]["lambda_"] == binary.lambda_
    assert not np.any(clf.intercept_)  # the runs' model, unpolished
    assert clf.n_iter_ == len(BATCHES)


def test_a_stream_s_budget_is_split_equally_whatever_its_first_batch_holds():
    # A stream sorted by class: the first batch holds class 0 only; every pair still gets its
    # equal share, fixed before any row is seen, and every pair's run fills it later.
    X, y = blobs(1800, 3, 3)
    order = np.argsort(y, kind="stable")
    X, y = X[order], y[order]
    clf = BudgetSVC(budget=60, **KW)
    for a in range(0, 1800, 300):
        clf.partial_fit(X[a : a + 300], y[a : a + 300], classes=[0, 1, 2])
    assert [p["budget"] for p in clf.fit_stats_["pairs"]] == [20, 20, 20]
    assert clf.n_support_per_pair_.tolist() == [20, 20, 20]
    assert [p["rows"] for p in clf.fit_stats_["pairs"]] == [
        int(np.sum((y == a) | (y == b))) for a, b in [(0, 1), (0, 2), (1, 2)]
    ]


@given(
    n_classes=st.integers(3, 6),
    extra=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_stream_keeps_its_budget(n_classes, extra, seed):
    n_pairs = n_classes * (n_classes - 1) // 2
    budget = 2 * n_pairs + extra
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, 3))
    y = rng.integers(0, n_classes, 300)
    clf = BudgetSVC(budget=budget, **dict(KW, random_state=seed))
    for a in range(0, 300, 100):
        clf.partial_fit(X[a : a + 100], y[a : a + 100], classes=np.arange(n_classes))
    budgets = [p["budget"] for p in clf.fit_stats_["pairs"]]
    assert sum(budgets) == budget and max(budgets) - min(budgets) <= 1
    assert np.all(clf.n_support_per_pair_ <= budgets)
    assert clf.support_vectors_.shape[0] == clf.n_support_per_pair_.sum() <= budget
    for group in pair_groups(clf):  # a row may serve two pairs, never twice in one
        vectors = clf.support_vectors_[group]
        assert len(np.unique(vectors, axis=0)) == vectors.shape[0]


def test_a_stream_predicts_as_fit_s_one_vs_one():
    X, y = blobs(3000, 4, 4, scale=3.0)
    Xt, yt = blobs(3000, 4, 4, scale=3.0)
    Xt = Xt + np.random.default_rng(5).normal(scale=0.3, size=Xt.shape)
    fitted = BudgetSVC(budget=120, epochs=2, **KW).fit(X, y)
    clf = BudgetSVC(budget=120, **KW)
    for _ in range(2):
        for a in range(0, 3000, 500):
            clf.partial_fit(X[a : a + 500], y[a : a + 500], classes=[0, 1, 2, 3], n_samples=6000)
    assert np.mean(clf.predict(Xt) == fitted.predict(Xt)) >= 0.95
    # Polished on the rows (polish_coef solves each pair on its two classes' rows).
    clf.polish_coef(X, y)
    assert np.mean(clf.predict(Xt) == fitted.predict(Xt)) >= 0.97
    assert clf.score(Xt, yt) >= fitted.score(Xt, yt) - 0.02


def test_auto_follows_fit_s_rule():
    X, y = blobs(600, 3, 6)
    kw = {k: v for k, v in KW.items() if k != "multiclass"}

    def started(budget, **extra):
        return BudgetSVC(budget=budget, **kw, **extra).partial_fit(X, y, classes=[0, 1, 2])

    assert started(1499).multiclass_ == "shared"
    assert started(1500).multiclass_ == "ovo"
    assert started(1500, multiclass="shared").multiclass_ == "shared"
    assert started(6, multiclass="ovo").multiclass_ == "ovo"
    with pytest.raises(ValueError, match=r"budget=5 is less than the 6 .* 3 class pairs"):
        started(5, multiclass="ovo")


def test_the_same_stream_on_any_thread_count():
    X, y = blobs(1200, 4, 7)
    one = stream(BudgetSVC(budget=60, n_jobs=1, **KW), X, y, [0, 1, 2, 3])
    two = stream(BudgetSVC(budget=60, n_jobs=2, **KW), X, y, [0, 1, 2, 3])
    assert_array_equal(one.support_vectors_, two.support_vectors_)
    assert_array_equal(one.dual_coef_, two.dual_coef_)


def test_a_stream_pickles_mid_way_saves_and_loads(tmp_path):
    X, y = blobs(1200, 3, 8)
    labels = np.array([35, -1, 7])[y]
    a = BudgetSVC(budget=45, **KW).partial_fit(X[:400], labels[:400], classes=[-1, 7, 35])
    assert_pickled_stream_continues_identically(a, X, labels, 400, 800)
    path = tmp_path / "stream.bsvm"
    a.save(path)
    loaded = load_model(path)
    assert loaded.multiclass_ == "ovo"
    assert_array_equal(loaded.n_support_per_pair_, a.n_support_per_pair_)
    assert_array_equal(loaded.decision_function(X), a.decision_function(X))
    assert_array_equal(loaded.predict(X), a.predict(X))


def test_a_failed_batch_leaves_the_stream_as_it_was():
    X, y = blobs(900, 3, 9)
    clf = BudgetSVC(budget=45, **KW).partial_fit(X[:300], y[:300], classes=[0, 1, 2])
    bad = X[300:600].copy()
    bad[150, 1] = np.nan
    given_rows = bad.copy()
    with pytest.raises(ValueError, match="NaN"):
        clf.partial_fit(bad, y[300:600])
    assert_array_equal(bad, given_rows)  # nothing the caller passed is changed
    with pytest.raises(ValueError, match="not in classes"):
        clf.partial_fit(X[300:600], y[300:600] + 1)
    with pytest.raises(ValueError, match="differs"):
        clf.partial_fit(X[300:600], y[300:600], classes=[0, 1])
    clf.partial_fit(X[300:600], y[300:600])
    plain = BudgetSVC(budget=45, **KW).partial_fit(X[:300], y[:300], classes=[0, 1, 2])
    plain.partial_fit(X[300:600], y[300:600])
    assert_array_equal(clf.dual_coef_, plain.dual_coef_)
    assert clf.fit_stats_["iterations"] == plain.fit_stats_["iterations"]


def test_the_pairs_runs_refuse_what_they_cannot_step():
    from budgetsvm import _budgetsvm

    X, y = blobs(50, 3, 10)
    clf = BudgetSVC(budget=30, **KW).partial_fit(X, y, classes=[0, 1, 2])
    streams = clf._pair_streams
    y_index = np.ascontiguousarray(y, dtype=np.uint32)
    pairs = [(0, 1), (0, 2), (1, 2)]
    with pytest.raises(ValueError, match="one pair of classes per stream"):
        _budgetsvm.partial_fit_pairs(streams, X, y_index, pairs[:2])
    with pytest.raises(ValueError, match="given twice"):
        _budgetsvm.partial_fit_pairs([streams[0]] * 2, X, y_index, pairs[:2])
    with pytest.raises(ValueError, match="two distinct classes"):
        _budgetsvm.partial_fit_pairs(streams, X, y_index, [(0, 1), (0, 2), (2, 2)])
    with pytest.raises(ValueError, match="rows"):
        _budgetsvm.partial_fit_pairs(streams, X[:10], y_index, pairs)
    # Rows named per pair (fit_file's subsets): rows of the pair's classes, ascending.
    named = [np.flatnonzero((y == a) | (y == b)).astype(np.int64) for a, b in pairs]
    with pytest.raises(ValueError, match="one array of rows per pair"):
        _budgetsvm.partial_fit_pairs(streams, X, y_index, pairs, pair_rows=named[:2])
    other = int(np.flatnonzero(y == 2)[0])
    wrong = [np.array([other], dtype=np.int64)] + named[1:]
    with pytest.raises(ValueError, match=rf"pair_rows\[0\] names row {other}, which is not a row"):
        _budgetsvm.partial_fit_pairs(streams, X, y_index, pairs, pair_rows=wrong)
    for bad in (-1, 50):
        with pytest.raises(ValueError, match=f"names row {bad}"):
            _budgetsvm.partial_fit_pairs(
                streams, X, y_index, pairs, pair_rows=[np.array([bad], np.int64)] + named[1:]
            )
    with pytest.raises(ValueError, match="must be ascending"):
        _budgetsvm.partial_fit_pairs(
            streams, X, y_index, pairs, pair_rows=[named[0][::-1].copy()] + named[1:]
        )
    shared = BudgetSVC(budget=30, multiclass="shared", gamma=0.5).partial_fit(
        X, y, classes=[0, 1, 2]
    )
    with pytest.raises(ValueError, match="binary"):
        _budgetsvm.partial_fit_pairs([shared._stream], X, y_index, pairs[:1])


# --- fit_file -------------------------------------------------------------------------------------


@pytest.mark.parametrize("multiclass", ["auto", "ovo"])
def test_fit_file_of_two_classes_is_the_binary_model(tmp_path, multiclass):
    X, y = blobs(500, 2, 11)
    path = write_libsvm(tmp_path / "two.svm", X, y)
    params = dict(KW, budget=30, epochs=2, shuffle=False)
    clf = BudgetSVC(**dict(params, multiclass=multiclass)).fit_file(path, chunk_rows=128)
    binary = BudgetSVC(**dict(params, multiclass="shared")).fit_file(path, chunk_rows=128)
    assert clf.multiclass_ == "binary"
    assert_array_equal(clf.dual_coef_, binary.dual_coef_)
    assert_array_equal(clf.intercept_, binary.intercept_)


@pytest.mark.parametrize("subsets", [False, True])
@pytest.mark.parametrize("polish", [False, True])
def test_fit_file_equals_fit_s_one_vs_one_on_the_loaded_file(
    tmp_path, polish, subsets, monkeypatch
):
    # Without shuffling both visit each pair's rows in the file's order: the same budgets
    # (split by the pairs' rows, which the first pass counts), the same runs, and the same
    # polish (each pair on the rows of its two classes, chunk by chunk from the file). Bit for
    # bit where the pairs' polishes form the Newton system (the probe off); the probe's
    # Hessian-free solve adds its sums in the file's chunks, so only to rounding with it
    # (test_fit_file_class_weights_reach_each_pair_as_in_fit). With few rows allowed per
    # support vector (PASS_ROWS_PER_SV) the polished pairs' passes see the same random subsets
    # of their rows, picked from the chunks.
    monkeypatch.setattr(PolishMethodProbe, "hessian_free_from", lambda self: None)
    if subsets:
        monkeypatch.setattr(_one_vs_one, "PASS_ROWS_PER_SV", 4)
    X, y = blobs(1200, 4, 12)
    X[:, 1] = np.where(np.abs(X[:, 1]) < 0.3, 0.0, X[:, 1])  # some sparsity
    path = write_libsvm(tmp_path / "train.svm", X, y)
    params = dict(KW, budget=100, epochs=2, shuffle=False, polish=polish)
    X_file, y_file = load_svmlight_file(path)
    in_memory = BudgetSVC(**params).fit(X_file, y_file)
    from_file = BudgetSVC(**params, polish_cache_size=0.05).fit_file(path, chunk_rows=100)
    assert from_file.multiclass_ == "ovo"
    assert_array_equal(from_file.n_support_per_pair_, in_memory.n_support_per_pair_)
    assert_array_equal(dense(from_file.support_vectors_), dense(in_memory.support_vectors_))
    assert_array_equal(from_file.dual_coef_, in_memory.dual_coef_)
    assert_array_equal(from_file.intercept_, in_memory.intercept_)
    rows = [int(np.sum((y == a) | (y == b))) for a, b in itertools.combinations(range(4), 2)]
    stats = from_file.fit_stats_["pairs"]
    assert [p["rows"] for p in stats] == rows
    assert [p["budget"] for p in stats] == pair_budgets(100, rows)
    for p in (stats, in_memory.fit_stats_["pairs"]):
        limited = [
            min(r, 4 * b) if subsets and polish else r
            for r, b in zip(rows, pair_budgets(100, rows))
        ]
        assert [q["pass_rows"] for q in p] == limited
        assert [q["iterations"] for q in p] == [2 * n for n in limited]
    assert from_file.support_vectors_.shape[0] <= 100
    assert from_file.n_iter_ == 2 and from_file.fit_stats_["epochs"] == 2
    if polish:
        assert all(p["polish"]["converged"] for p in stats)
        # The cache held a few chunks' kernel values: the file was read again per pass.
        assert min(p["polish"]["cached_rows"] for p in stats) < min(rows)
    else:
        assert not np.any(from_file.intercept_)


def test_each_pair_of_fit_file_is_the_binary_model_on_its_rows(tmp_path, monkeypatch):
    # Pair (a, b) of a shuffled fit_file: the binary stream of the chunks' rows of a and b, with
    # the pair's budget, seed and rows; then polished on those rows as a binary model is
    # polished on a file holding only them (the polish's probe off: each pair finds its
    # directions as the binary model does). Without averaging, where merges place their points
    # for the last iterate whether a polish follows or not.
    monkeypatch.setattr(PolishMethodProbe, "hessian_free_from", lambda self: None)
    X, y = blobs(1000, 3, 13)
    path = write_libsvm(tmp_path / "train.svm", X, y)
    params = dict(KW, budget=60, epochs=1, average=False)
    clf = BudgetSVC(**params).fit_file(path, chunk_rows=150)
    pairs = list(itertools.combinations(range(3), 2))
    rows = [int(np.sum(np.isin(y, pair))) for pair in pairs]
    budgets = pair_budgets(60, rows)
    for p, ((a, b), group) in enumerate(zip(pairs, pair_groups(clf))):
        binary = BudgetSVC(**dict(params, budget=budgets[p], random_state=pair_seed(0, p)))
        for lo in range(0, 1000, 150):
            keep = np.flatnonzero(np.isin(y[lo : lo + 150], [a, b])) + lo
            first = dict(classes=[a, b], n_samples=rows[p]) if lo == 0 else {}
            binary.partial_fit(sp.csr_matrix(X[keep]), y[keep].astype(float), **first)
        assert_array_equal(dense(clf.support_vectors_[group]), dense(binary.support_vectors_))
        pair_path = write_libsvm(
            tmp_path / f"pair{p}.svm", X[np.isin(y, [a, b])], y[np.isin(y, [a, b])]
        )
        classes = np.array([a, b], dtype=np.float64)
        pair_file = file_summary(pair_path, chunk_rows=150, n_features=3)
        binary._apply_polish(binary._polish_file(pair_file, rows[p], classes))
        assert_array_equal(clf.dual_coef_[0, group], -binary.dual_coef_[0])
        assert clf.intercept_[p] == -binary.intercept_[0]


def test_fit_file_predicts_as_fit_and_keeps_its_budget(tmp_path):
    X, y = blobs(2400, 4, 14, scale=3.0)
    path = write_libsvm(tmp_path / "train.svm", X, y)
    X_file, y_file = load_svmlight_file(path)
    fitted = BudgetSVC(budget=90, epochs=2, **KW).fit(X_file, y_file)
    from_file = BudgetSVC(budget=90, epochs=2, **KW).fit_file(path, chunk_rows=400)
    assert from_file.support_vectors_.shape[0] <= 90
    assert np.all(
        from_file.n_support_per_pair_ <= [p["budget"] for p in from_file.fit_stats_["pairs"]]
    )
    assert np.mean(from_file.predict(X_file) == fitted.predict(X_file)) >= 0.95


def test_fit_file_class_weights_reach_each_pair_as_in_fit(tmp_path):
    X, y = blobs(900, 3, 15)
    path = write_libsvm(tmp_path / "train.svm", X, y)
    X_file, y_file = load_svmlight_file(path)
    for class_weight in ({1: 3.0}, "balanced"):
        params = dict(KW, budget=45, epochs=2, shuffle=False, class_weight=class_weight)
        a = BudgetSVC(**params).fit_file(path, chunk_rows=200)
        b = BudgetSVC(**params).fit(X_file, y_file)
        assert_array_equal(a.class_weight_, b.class_weight_)
        assert_array_equal(a.support_vectors_, b.support_vectors_)
        # The first pair's polish probes the Hessian-free solve, whose sums follow the file's
        # chunks: the same solution to rounding.
        assert_allclose(a.dual_coef_, b.dual_coef_, rtol=1e-9, atol=1e-12)
        assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-9, atol=1e-9)


def test_fit_file_s_model_file_round_trip_and_its_runs_continue(tmp_path):
    X, y = blobs(900, 3, 16)
    path = write_libsvm(tmp_path / "train.svm", X, y)
    clf = BudgetSVC(budget=45, epochs=2, **KW).fit_file(path, chunk_rows=200)
    model = tmp_path / "m.bsvm"
    clf.save(model)
    loaded = load_model(model)
    assert loaded.multiclass_ == "ovo"
    assert_array_equal(loaded.n_support_per_pair_, clf.n_support_per_pair_)
    assert_array_equal(loaded.decision_function(X), clf.decision_function(X))
    again = pickle.loads(pickle.dumps(clf))
    assert_array_equal(again.predict(X), clf.predict(X))
    # partial_fit continues each pair's run (as after fit).
    steps = clf.fit_stats_["iterations"]
    clf.partial_fit(X[:100], y[:100])
    assert clf.fit_stats_["iterations"] == steps + 2 * 100  # each row steps two of three pairs
    assert clf.multiclass_ == "ovo" and clf.n_iter_ == 3


def test_fit_file_auto_follows_fit_s_rule(tmp_path):
    X, y = blobs(600, 3, 17)
    path = write_libsvm(tmp_path / "train.svm", X, y)
    kw = {k: v for k, v in KW.items() if k != "multiclass"}
    for budget, expected in [(1499, "shared"), (1500, "ovo")]:
        clf = BudgetSVC(budget=budget, epochs=1, polish=False, **kw).fit_file(path)
        assert clf.multiclass_ == expected
    with pytest.raises(ValueError, match=r"budget=5 is less than the 6"):
        BudgetSVC(budget=5, **KW).fit_file(path)
