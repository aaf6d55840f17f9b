"""BudgetSVC on several classes: the one-vs-one design (``multiclass='ovo'``, the default of
``fit``) against independent formulations (each pair's binary model, scikit-learn's vote and
its OneVsOneClassifier), and the shared budget (``multiclass='shared'``) where it remains."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from budgetsvm import BudgetSVC, KernelSVC, _one_vs_one, load_model
from budgetsvm._one_vs_one import PolishMethodProbe, ovr_scores, pair_budgets, pair_seed, pass_rows
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.multiclass import OneVsOneClassifier
from sklearn.utils.multiclass import _ovr_decision_function

# 'ovo' asked for: 'auto' takes it only from 500 SVs per pair (test_auto_...).
KW = dict(C=1.0, gamma=0.5, epochs=2, random_state=0, multiclass="ovo")


def blobs(n: int, k: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.5, size=(k, 3))
    y = rng.integers(0, k, n)
    return centers[y] + rng.normal(size=(n, 3)), y


@pytest.mark.parametrize("probe", [False, True])
def test_each_pair_is_the_binary_model_on_its_two_classes(probe, monkeypatch):
    # The model is its pairs' binary BudgetSVCs side by side: pair (a, b) trained on the rows of
    # a and b (in their order), with its share of the budget and its own seed; its value is
    # positive for a. Bit for bit where the pairs' polishes find their directions as the binary
    # model does (the probe off); with the probe (PolishMethodProbe: Hessian-free after the first
    # pair) the same optimum to the polish's tolerance.
    if not probe:
        monkeypatch.setattr(PolishMethodProbe, "hessian_free_from", lambda self: None)
    X, y = blobs(900, 4, 0)
    labels = np.array(["w", "x", "y", "z"])[y]
    clf = BudgetSVC(budget=120, **KW).fit(X, labels)
    assert clf.multiclass_ == "ovo"
    pairs = list(itertools.combinations(range(4), 2))
    rows = [((y == a) | (y == b)).sum() for a, b in pairs]
    assert clf.n_support_per_pair_.tolist() == [s["n_sv"] for s in clf.fit_stats_["pairs"]]
    assert [s["budget"] for s in clf.fit_stats_["pairs"]] == pair_budgets(120, rows)
    assert clf.support_vectors_.shape[0] == clf.n_support_per_pair_.sum() <= 120
    starts = np.r_[0, np.cumsum(clf.n_support_per_pair_)]
    pair_values = clf._pairwise_decision(X)
    for p, (a, b) in enumerate(pairs):
        keep = (y == a) | (y == b)
        kw = dict(KW, random_state=pair_seed(0, p))
        binary = BudgetSVC(budget=pair_budgets(120, rows)[p], **kw)
        binary.set_params(gamma=0.5).fit(X[keep], labels[keep])
        group = slice(starts[p], starts[p + 1])
        assert_array_equal(clf.support_vectors_[group], binary.support_vectors_)
        if probe:
            objective = clf.fit_stats_["pairs"][p]["polish"]["objective"][0]
            assert objective == pytest.approx(binary.fit_stats_["polish"]["objective"][0], rel=1e-5)
            assert_allclose(pair_values[:, p], -binary.decision_function(X), atol=2e-3)
            continue
        assert_array_equal(clf.dual_coef_[0, group], -binary.dual_coef_[0])
        assert clf.intercept_[p] == -binary.intercept_[0]
        assert_allclose(pair_values[:, p], -binary.decision_function(X), atol=1e-10)


def test_a_large_pair_s_pass_sees_a_subset_and_its_polish_every_row(monkeypatch):
    # Beyond PASS_ROWS_PER_SV rows per support vector a pair's budgeted pass runs on a random
    # subset of its rows (C as a fit of the subset) and the polish on all of them: pair (a, b)
    # has the support vectors of the binary BudgetSVC fitted on the subset, and the optimum of
    # its coefficients on all the pair's rows (polish_coef, from the subset's own polish: the
    # same optimum to the polish's tolerance). Without the polish (the pass is the model)
    # every row is passed.
    monkeypatch.setattr(PolishMethodProbe, "hessian_free_from", lambda self: None)
    monkeypatch.setattr(_one_vs_one, "PASS_ROWS_PER_SV", 8)
    X, y = blobs(900, 4, 0)
    clf = BudgetSVC(budget=40, **KW).fit(X, y)
    pairs = list(itertools.combinations(range(4), 2))
    starts = np.r_[0, np.cumsum(clf.n_support_per_pair_)]
    pair_values = clf._pairwise_decision(X)
    for p, ((a, b), stats) in enumerate(zip(pairs, clf.fit_stats_["pairs"])):
        index = np.flatnonzero((y == a) | (y == b))
        assert stats["rows"] == len(index) > 8 * stats["budget"] == stats["pass_rows"]
        assert stats["iterations"] == KW["epochs"] * stats["pass_rows"]
        passed = pass_rows(index, stats["budget"], pair_seed(0, p))
        binary = BudgetSVC(budget=stats["budget"], **dict(KW, random_state=pair_seed(0, p)))
        binary.set_params(gamma=0.5).fit(X[passed], y[passed])
        assert_array_equal(clf.support_vectors_[starts[p] : starts[p + 1]], binary.support_vectors_)
        binary.polish_coef(X[index], y[index])
        objective = binary.fit_stats_["polish"]["objective"][0]
        assert stats["polish"]["objective"][0] == pytest.approx(objective, rel=1e-5)
        assert_allclose(pair_values[:, p], -binary.decision_function(X), atol=2e-3)
    unpolished = BudgetSVC(budget=40, polish=False, **KW).fit(X, y)
    for (a, b), stats in zip(pairs, unpolished.fit_stats_["pairs"]):
        assert stats["pass_rows"] == stats["rows"] == ((y == a) | (y == b)).sum()


@given(
    n=st.integers(0, 3_000),
    budget=st.integers(2, 40),
    seed=st.integers(0, 2**64 - 1),
)
def test_pass_rows_are_all_or_a_subset_of_the_limit(n, budget, seed):
    index = np.sort(np.random.default_rng(0).choice(10 * n + 1, size=n, replace=False))
    passed = pass_rows(index, budget, seed)
    limit = _one_vs_one.PASS_ROWS_PER_SV * budget
    if n <= limit:
        assert passed is index
        return
    assert len(passed) == limit == len(np.unique(passed))
    assert np.all(np.diff(passed) > 0) and np.isin(passed, index).all()
    assert_array_equal(passed, pass_rows(index, budget, seed))


def test_the_first_pair_s_polish_chooses_the_others_method():
    # The rule on the first pair's figures, later pairs' figures ignored.
    for stats, n_sv, expected in [
        (dict(system_from=0, cg_products=25), 100, True),
        (dict(system_from=0, cg_products=26), 100, False),  # more than forming the system
        (dict(system_from=3, cg_products=5), 100, False),  # it stalled and formed it
    ]:
        method = PolishMethodProbe()
        assert method.hessian_free_from() == 0  # the probe itself runs Hessian-free
        method.record(stats, n_sv)
        method.record(dict(system_from=0, cg_products=0), n_sv)
        assert method.hessian_free is expected
        assert method.hessian_free_from() == (0 if expected else None)
    # In a fit: the first pair ran Hessian-free, and where it failed the rule the others formed
    # the Newton system (no conjugate-gradient products below HESSIAN_FREE_BASIS).
    X, y = blobs(1500, 4, 3)
    clf = BudgetSVC(budget=300, **KW).fit(X, y)
    first, *others = [p["polish"] for p in clf.fit_stats_["pairs"]]
    assert first["cg_products"] > 0 or first["system_from"] > 0
    if first["system_from"] > 0 or 4 * first["cg_products"] > clf.n_support_per_pair_[0]:
        assert all(p["cg_products"] == 0 for p in others)


def test_decision_and_predict_follow_scikit_learn_s_vote():
    X, y = blobs(700, 5, 1)
    clf = BudgetSVC(budget=100, **KW).fit(X, y)
    pair_values = clf._pairwise_decision(X)
    expected = _ovr_decision_function(pair_values < 0, -pair_values, 5)
    assert_allclose(clf.decision_function(X), expected, atol=1e-12)
    assert_array_equal(clf.predict(X), np.argmax(expected, axis=1))
    assert clf.decision_function(X).shape == (700, 5)
    # Overlapping classes: the exact SVM's training accuracy is 82.3%.
    assert clf.score(X, y) > KernelSVC(gamma=0.5).fit(X, y).score(X, y) - 0.03


def test_agrees_with_scikit_learn_s_one_vs_one_wrapper():
    # Budgets that do not bind: each pair's model is the polished SVM over its rows, whatever
    # the order of the steps, so the two agree up to the solvers' tolerance.
    X, y = blobs(600, 3, 2)
    Xt, _ = blobs(2000, 3, 3)
    ours = BudgetSVC(budget=3 * 600, **KW).fit(X, y)
    wrapped = OneVsOneClassifier(BudgetSVC(budget=600, **KW)).fit(X, y)
    assert np.mean(ours.predict(Xt) == wrapped.predict(Xt)) > 0.99


def test_the_same_model_on_any_thread_count():
    X, y = blobs(800, 4, 4)
    one = BudgetSVC(budget=80, n_jobs=1, **KW).fit(X, y)
    two = BudgetSVC(budget=80, n_jobs=2, **KW).fit(X, y)
    assert_array_equal(one.support_vectors_, two.support_vectors_)
    assert_array_equal(one.dual_coef_, two.dual_coef_)
    assert_array_equal(one.intercept_, two.intercept_)


def test_sparse_rows_give_the_dense_model():
    X, y = blobs(500, 3, 5)
    dense = BudgetSVC(budget=60, **KW).fit(X, y)
    sparse = BudgetSVC(budget=60, **KW).fit(sp.csr_matrix(X), y)
    assert_allclose(sparse.dual_coef_, dense.dual_coef_, atol=1e-8)
    assert_array_equal(sparse.predict(sp.csr_matrix(X)), dense.predict(X))


def test_two_classes_are_the_binary_model_whatever_multiclass_says():
    X, y = blobs(400, 2, 6)
    kw = {k: v for k, v in KW.items() if k != "multiclass"}
    models = [BudgetSVC(budget=40, multiclass=m, **kw).fit(X, y) for m in ("auto", "ovo", "shared")]
    for m in models:
        assert m.multiclass_ == "binary" and m.n_support_per_pair_ is None
        assert_array_equal(m.dual_coef_, models[0].dual_coef_)
        assert_array_equal(m.support_vectors_, models[0].support_vectors_)


def test_auto_is_one_vs_one_from_500_svs_per_pair():
    X, y = blobs(300, 3, 7)
    kw = {k: v for k, v in KW.items() if k != "multiclass"}
    assert BudgetSVC(budget=1499, **kw).fit(X, y).multiclass_ == "shared"
    assert BudgetSVC(budget=1500, **kw).fit(X, y).multiclass_ == "ovo"
    assert BudgetSVC(budget=1500, multiclass="shared", **kw).fit(X, y).multiclass_ == "shared"
    assert BudgetSVC(budget=6, multiclass="ovo", **kw).fit(X, y).multiclass_ == "ovo"


def test_shared_keeps_one_budget_with_a_coefficient_per_class():
    X, y = blobs(600, 3, 7)
    kw = {k: v for k, v in KW.items() if k != "multiclass"}
    clf = BudgetSVC(budget=50, multiclass="shared", **kw).fit(X, y)
    assert clf.multiclass_ == "shared" and clf.n_support_per_pair_ is None
    assert clf.dual_coef_.shape == (3, clf.support_vectors_.shape[0])
    assert clf.score(X, y) > 0.85


def test_a_budget_below_the_pairs_is_refused_naming_them():
    X, y = blobs(300, 5, 8)
    with pytest.raises(ValueError, match=r"budget=19 is less than the 20 .* 10 class pairs"):
        BudgetSVC(budget=19, **KW).fit(X, y)
    # Each pair then has two vectors at least.
    clf = BudgetSVC(budget=20, **KW).fit(X, y)
    assert clf.n_support_per_pair_.tolist() == [2] * 10


@given(
    budget=st.integers(1, 10_000),
    rows=st.lists(st.integers(0, 100_000), min_size=1, max_size=45),
)
def test_pair_budgets_split_the_budget_by_the_square_root_of_the_rows(budget, rows):
    least = 2 * len(rows)
    if budget < least:
        with pytest.raises(ValueError):
            pair_budgets(budget, rows)
        return
    budgets = pair_budgets(budget, rows)
    assert sum(budgets) == budget and min(budgets) >= 2
    # In proportion to sqrt(rows) within one vector (beyond the two each pair has first).
    total = sum(np.sqrt(rows))
    for b, r in zip(budgets, rows):
        share = (budget - least) * np.sqrt(r) / total if total else (budget - least) / len(rows)
        assert abs((b - 2) - share) < 1.0 + 1e-9


@given(values=st.lists(st.floats(-5, 5), min_size=6, max_size=6), n=st.integers(1, 3))
def test_ovr_scores_equal_scikit_learn_s(values, n):
    pair_values = np.tile(np.array(values), (n, 1))
    expected = _ovr_decision_function(pair_values <= 0, -pair_values, 4)
    assert_allclose(ovr_scores(pair_values, 4), expected, atol=1e-12)


def test_weights_reach_each_pair():
    # A class weighed up wins more of the rows it shares with its neighbours.
    X, y = blobs(900, 3, 9)
    X = X * 0.3  # overlapping classes
    plain = BudgetSVC(budget=60, **KW).fit(X, y)
    heavy = BudgetSVC(budget=60, class_weight={0: 10.0}, **KW).fit(X, y)
    assert (heavy.predict(X) == 0).sum() > (plain.predict(X) == 0).sum()
    # sample_weight of 2 on every row is C doubled.
    doubled = BudgetSVC(budget=60, **KW).fit(X, y, sample_weight=np.full(900, 2.0))
    twice_c = BudgetSVC(budget=60, **dict(KW, C=2.0)).fit(X, y)
    assert_allclose(doubled.dual_coef_, twice_c.dual_coef_, rtol=1e-6, atol=1e-8)
    # Rows of weight 0 are left out of their pairs.
    w = np.ones(900)
    w[:300] = 0.0
    dropped = BudgetSVC(budget=60, **KW).fit(X, y, sample_weight=w)
    assert sum(s["rows"] for s in dropped.fit_stats_["pairs"]) == 2 * 600


def test_probabilities_from_the_pairs_values():
    X, y = blobs(600, 3, 10)
    clf = BudgetSVC(budget=60, probability=True, **KW).fit(X, y)
    proba = clf.predict_proba(X)
    assert proba.shape == (600, 3)
    assert_allclose(proba.sum(axis=1), 1.0)
    assert np.mean(np.argmax(proba, axis=1) == clf.predict(X)) > 0.95
    assert clf.probA_.shape == (3,) and np.all(clf.probA_ < 0)


def test_model_file_and_pickle_keep_the_pairs(tmp_path):
    import pickle

    X, y = blobs(600, 4, 11)
    labels = np.array([35, -1, 7, 0])[y]
    clf = BudgetSVC(budget=70, **KW).fit(X, labels)
    path = tmp_path / "m.bsvm"
    clf.save(path)
    loaded = load_model(path)
    assert loaded.multiclass_ == "ovo"
    assert_array_equal(loaded.n_support_per_pair_, clf.n_support_per_pair_)
    assert_array_equal(loaded.decision_function(X), clf.decision_function(X))
    assert_array_equal(loaded.predict(X), clf.predict(X))
    again = pickle.loads(pickle.dumps(clf))
    assert_array_equal(again.predict(X), clf.predict(X))


def test_a_model_file_whose_pairs_do_not_add_up_is_refused(tmp_path):
    import json
    import zipfile

    from budgetsvm.modelfile import ModelFormatError

    X, y = blobs(300, 3, 12)
    path = tmp_path / "m.bsvm"
    BudgetSVC(budget=30, **KW).fit(X, y).save(path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    header = json.loads(members["header.json"])
    header["one_vs_one"]["n_support_per_pair"][0] += 1
    members["header.json"] = json.dumps(header).encode()
    bad = tmp_path / "bad.bsvm"
    with zipfile.ZipFile(bad, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(ModelFormatError, match="n_support_per_pair"):
        load_model(bad)


def test_polish_coef_solves_each_pair_again():
    X, y = blobs(800, 3, 13)
    fitted = BudgetSVC(budget=60, **KW).fit(X, y)
    before = fitted.decision_function(X)
    # At the optimum already: solved again from there, the model stays (to the tolerance).
    fitted.polish_coef(X, y)
    assert_allclose(fitted.decision_function(X), before, atol=1e-3)
    unpolished = BudgetSVC(budget=60, polish=False, **KW).fit(X, y)
    assert unpolished.multiclass_ == "ovo" and not np.any(unpolished.intercept_)
    vectors = unpolished.support_vectors_.copy()
    unpolished.polish_coef(X, y)
    assert_array_equal(unpolished.support_vectors_, vectors)
    for pair in unpolished.fit_stats_["pairs"]:
        assert pair["polish"]["converged"]
        assert pair["polish"]["objective"][0] < pair["polish"]["objective_start"][0]
    assert unpolished.score(X, y) >= fitted.score(X, y) - 0.02


def test_partial_fit_continues_each_pair_s_run():
    X, y = blobs(900, 3, 14)
    first, more = slice(0, 600), slice(600, 900)
    clf = BudgetSVC(budget=45, **KW).fit(X[first], y[first]).partial_fit(X[more], y[more])
    assert clf.multiclass_ == "ovo" and clf.intercept_.tolist() == [0.0, 0.0, 0.0]
    starts = np.r_[0, np.cumsum(clf.n_support_per_pair_)]
    for p, (a, b) in enumerate(itertools.combinations(range(3), 2)):
        keep = (y == a) | (y == b)
        rows_first = keep & (np.arange(900) < 600)
        binary = BudgetSVC(
            budget=clf.fit_stats_["pairs"][p]["budget"], **dict(KW, random_state=pair_seed(0, p))
        )
        binary.fit(X[rows_first], y[rows_first])
        rows_more = keep & (np.arange(900) >= 600)
        binary.partial_fit(X[rows_more], y[rows_more])
        group = slice(starts[p], starts[p + 1])
        assert_array_equal(clf.support_vectors_[group], binary.support_vectors_)
        assert_array_equal(clf.dual_coef_[0, group], -binary.dual_coef_[0])
    # A BSCA fit has no run to continue (no partial_fit at all), a loaded model neither.
    assert not hasattr(BudgetSVC(solver="bsca", **KW), "partial_fit")


def test_what_the_one_vs_one_model_cannot_do_says_so(tmp_path):
    X, y = blobs(300, 3, 14)
    clf = BudgetSVC(budget=30, **KW).fit(X, y)
    clf.save(tmp_path / "m")
    with pytest.raises(ValueError, match="no runs to continue"):
        load_model(tmp_path / "m").partial_fit(X, y)
    with pytest.raises(ValueError, match="record_history"):
        BudgetSVC(budget=30, record_history=True, **KW).fit(X, y)
    with pytest.raises(ValueError, match="multiclass"):
        BudgetSVC(budget=30, **dict(KW, multiclass="ovr")).fit(X, y)
    # A stream on a fresh estimator follows fit's rule ('auto' below 500 SVs per pair: the
    # shared budget; tests/test_multiclass_streams.py).
    kw = {k: v for k, v in KW.items() if k != "multiclass"}
    stream = BudgetSVC(budget=30, **kw).partial_fit(X, y, classes=[0, 1, 2])
    assert stream.multiclass_ == "shared"


def test_fit_stats_report_every_pair():
    X, y = blobs(600, 4, 15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = BudgetSVC(budget=60, **KW).fit(X, y)
    stats = clf.fit_stats_
    assert stats["multiclass"] == "ovo" and len(stats["pairs"]) == 6
    assert [tuple(p["classes"]) for p in stats["pairs"]] == list(
        itertools.combinations(range(4), 2)
    )
    assert stats["iterations"] == sum(p["iterations"] for p in stats["pairs"])
    assert all(p["rows"] > 0 and "polish" in p for p in stats["pairs"])
    assert stats["seconds"] >= stats["pass_seconds"]


def test_a_callback_error_in_one_pair_stops_them_all():
    X, y = blobs(600, 4, 16)
    clf = BudgetSVC(budget=60, **dict(KW, epochs=3))
    seen = []

    def on_epoch(info):
        seen.append((info["pair"], info["epoch"], info["epochs"]))
        if len(seen) == 4:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        clf.fit(X, y, _callback=on_epoch)
    assert not hasattr(clf, "support_vectors_")
    # The hook sees the epochs done over all pairs, out of pairs x epochs.
    assert all(total == 6 * 3 for _, _, total in seen)
    assert [done for _, done, _ in seen] == list(range(1, len(seen) + 1))
