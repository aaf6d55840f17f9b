"""BudgetSVC's one-vs-one design for several classes (``multiclass='ovo'``).

Each class pair (a, b), a < b, in LIBSVM's order (0, 1), (0, 2), ..., gets a binary budgeted
model trained on the rows of its two classes only (the budgeted pass, then the polish), with
its share of the budget: the total ``budget`` is split over the pairs in proportion to the
square root of their rows (``pair_budgets``), each pair's budgeted pass running on at most
``PASS_ROWS_PER_SV`` of its rows per vector when the polish follows (``pass_rows``), so the model
keeps at most ``budget`` support vectors in all and a prediction costs one
kernel block K(X, S) over them, whatever the number of classes. A support vector belongs to
one pair (merging makes new points, which no other pair has), so the model is held grouped
by pair: ``support_vectors_`` pair after pair, ``dual_coef_`` (1, n_SV) each vector's
coefficient in its own pair's decision, ``n_support_per_pair_`` the group sizes and
``intercept_`` one value per pair. A pair's value is positive for class a, as LIBSVM's.

Why this design (``docs/multiclass_notes.md``): the shared budget makes every support vector
carry one coefficient per class and every merge weigh all of them, and its polish solves one
one-vs-rest problem per class over all rows; a pair sees only two classes' rows and a boundary
a few hundred vectors carry. On hardmc (six classes, 100,000 rows) it is faster than the shared
budget and as accurate as the exact SVM (the figures are in the notes).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from budgetsvm._probability import class_pairs

#: Support vectors each pair has at least (a binary budget is at least 2).
LEAST_PER_PAIR = 2

#: ``multiclass='auto'`` trains one-vs-one from this many support vectors per class pair on, the
#: shared budget below. Per support vector the shared budget is the more accurate (each serves
#: every class); with enough per pair one-vs-one reaches the exact SVM in a fraction of the
#: shared budget's time (the measurements: docs/multiclass_notes.md, hardmc and pendigits).
AUTO_PER_PAIR = 500


def one_vs_one_for(multiclass: str, budget: int, n_classes: int) -> bool:
    """Whether ``fit`` trains one-vs-one: 'ovo', or 'auto' with at least ``AUTO_PER_PAIR``
    support vectors per class pair; never for two classes."""
    if n_classes <= 2 or multiclass == "shared":
        return False
    return multiclass == "ovo" or budget >= AUTO_PER_PAIR * n_classes * (n_classes - 1) // 2


def pair_budgets(budget: int, pair_rows: Sequence[int]) -> List[int]:
    """The budget of each pair: ``LEAST_PER_PAIR`` each, the rest of ``budget`` split in
    proportion to the square root of the pairs' rows (the remainder to the largest fractions,
    earlier pairs first on ties).

    A pair's passes cost its rows times its budget, so a split in proportion to the rows puts
    the cost on the largest pairs as their rows squared, while their accuracy gains less per
    vector than a small pair's. hardmc, ``BudgetSVC(C=1, gamma=0.5, epochs=1)``, rows against
    their square roots: 1,000,000 rows, B = 12,000: 88.31% in 27.2-27.6 s, 88.32% in
    24.9-25.7 s; 100,000 rows, B = 12,000: 85.00% in 3.68 s, 84.97% in 3.49 s
    (docs/multiclass_notes.md, session 32)."""
    n_pairs = len(pair_rows)
    least = LEAST_PER_PAIR * n_pairs
    if budget < least:
        raise ValueError(
            f"budget={budget} is less than the {least} support vectors the {n_pairs} class pairs "
            f"of the one-vs-one model need ({LEAST_PER_PAIR} each); raise the budget or use "
            "multiclass='shared'"
        )
    rows = np.sqrt(np.asarray(pair_rows, dtype=np.float64))
    spare = budget - least
    share = spare * rows / rows.sum() if rows.sum() > 0 else np.full(n_pairs, spare / n_pairs)
    budgets = np.floor(share).astype(np.int64)
    left = spare - int(budgets.sum())
    order = np.argsort(-(share - budgets), kind="stable")
    budgets[order[:left]] += 1
    return [int(b) + LEAST_PER_PAIR for b in budgets]


#: A pair's budgeted pass (when the polish follows it) runs on at most this many of the pair's
#: rows per support vector of its budget, a random subset; the polish then fits the
#: coefficients on all of them. In one-vs-one every row is passed once per pair of its class
#: (K - 1 times), while the pass only places the support vectors, which a few hundred rows
#: per vector place as well as all of them. hardmc, 1,000,000 rows, B = 12,000, one epoch
#: (the pairs 260-530 rows per vector): all rows 88.32% in 28.4-30.0 s; a random 256 a vector
#: 88.30% in 25.9 s (the passes' CPU 10.8 -> 6.4 s); 192, 88.01%; 160, 88.12% (the draw moves
#: the accuracy by about 0.1 point; docs/multiclass_notes.md, session 34).
PASS_ROWS_PER_SV = 256


def pass_positions(n_rows: int, budget: int, seed: int) -> Optional[np.ndarray]:
    """Which of a pair's ``n_rows`` rows (their places among the pair's rows in data order)
    its budgeted pass sees: None for all, up to ``PASS_ROWS_PER_SV`` per support vector of
    ``budget``; beyond, that many drawn at random without replacement (from ``seed``, the
    pair's), ascending. ``fit`` and ``fit_file`` draw the same."""
    limit = PASS_ROWS_PER_SV * budget
    if n_rows <= limit:
        return None
    return np.sort(np.random.default_rng(seed).choice(n_rows, size=limit, replace=False))


def pass_rows(index: np.ndarray, budget: int, seed: int) -> np.ndarray:
    """The rows of ``index`` (a pair's, in data order) its budgeted pass sees
    (``pass_positions``)."""
    keep = pass_positions(len(index), budget, seed)
    return index if keep is None else index[keep]


def chunk_pass_rows(
    y_chunk: np.ndarray, pair: Tuple[int, int], keep: Optional[np.ndarray], seen: int
) -> np.ndarray:
    """The rows of a chunk (class indices ``y_chunk``) that pair ``pair``'s pass sees, where
    the pair's rows before the chunk number ``seen`` and ``keep`` is its ``pass_positions``."""
    rows = np.flatnonzero((y_chunk == pair[0]) | (y_chunk == pair[1]))
    if keep is not None and len(keep):
        places = seen + np.arange(len(rows))
        at = np.minimum(np.searchsorted(keep, places), len(keep) - 1)
        rows = rows[keep[at] == places]
    return rows.astype(np.int64)


def pair_seed(seed: int, pair: int) -> int:
    """The seed of pair ``pair``'s run: distinct per pair, the same on every platform."""
    return (seed + 0x9E3779B97F4A7C15 * (pair + 1)) % 2**64


def pair_rows(y_index: np.ndarray, n_classes: int) -> List[np.ndarray]:
    """For each pair (a, b) in LIBSVM's order, the indices of the rows of class a or b, in
    their order in the data."""
    members = [np.flatnonzero(y_index == c) for c in range(n_classes)]
    return [np.sort(np.concatenate((members[a], members[b]))) for a, b in class_pairs(n_classes)]


class PolishMethodProbe:
    """How the pairs' polishes find their Newton directions, decided once for all pairs.

    Below ``HESSIAN_FREE_BASIS`` support vectors a binary polish forms the Newton system, the
    safe choice on a single problem (where the Hessian-free solve's preconditioner fits the
    rows badly, as on a9a, conjugate gradients stall and forming the system late costs up to
    twice the time). The pairs of one data set are alike, so the first pair polished runs
    Hessian-free from its first iteration (``hessian_free_from=0``, which still forms the
    system when that stalls) as a probe: if it never formed the system and needed no more
    products than forming it costs (a quarter of its support vectors, the rule of the polish's
    own subsample probe), every other pair runs Hessian-free too, else the default. What it
    saves on hardmc: docs/multiclass_notes.md (session 30).
    """

    def __init__(self) -> None:
        self.hessian_free: Optional[bool] = None

    def hessian_free_from(self) -> Optional[int]:
        """The next pair's ``hessian_free_from``: 0 while probing or when the probe passed."""
        return None if self.hessian_free is False else 0

    def record(self, polish_stats: Dict[str, Any], n_sv: int) -> None:
        """Decides from the first pair's ``fit_stats_['polish']``."""
        if self.hessian_free is None:
            self.hessian_free = (
                polish_stats["system_from"] == 0 and 4 * polish_stats["cg_products"] <= n_sv
            )


def pair_progress(callback: Any, n_pairs: int, epochs: int) -> Any:
    """A caller's per-epoch hook (the command line's progress bar) for the pairs' runs at once:
    it sees the epochs done over all pairs out of ``n_pairs * epochs``."""
    if callback is None:
        return None
    done = [0] * n_pairs

    def on_epoch(info: Dict[str, Any]) -> None:
        done[info["pair"]] = info["epoch"]
        callback(dict(info, epoch=sum(done), epochs=n_pairs * epochs))

    return on_epoch


def stack(support_vectors: Sequence[Any]) -> Any:
    """The pairs' support vectors one after the other (CSR when they are sparse)."""
    if sp.issparse(support_vectors[0]):
        return sp.vstack(support_vectors, format="csr")
    return np.ascontiguousarray(np.vstack(support_vectors))


def ovr_scores(pair_values: np.ndarray, n_classes: int) -> np.ndarray:
    """Per-class scores from the pairs' values (n, n_pairs), positive for each pair's first
    class, as scikit-learn's SVC makes them (``decision_function_shape='ovr'``): a class's
    votes plus its summed confidences squashed into (-1/3, 1/3), so that the class of the
    largest score is the one with the most votes, ties going to the larger confidence."""
    n = pair_values.shape[0]
    votes = np.zeros((n, n_classes))
    confidence = np.zeros((n, n_classes))
    for k, (a, b) in enumerate(class_pairs(n_classes)):
        d = pair_values[:, k]
        wins_a = d > 0
        votes[:, a] += wins_a
        votes[:, b] += ~wins_a
        confidence[:, a] += d
        confidence[:, b] -= d
    return votes + confidence / (3.0 * (np.abs(confidence) + 1.0))


def summed_stats(pairs: List[Dict[str, Any]], seconds: float) -> Dict[str, Any]:
    """``fit_stats_`` of a one-vs-one model: the pairs' counts summed, each pair's own under
    "pairs"."""
    total: Dict[str, Any] = {"multiclass": "ovo"}
    for key in (
        "iterations",
        "insertions",
        "maintenance_events",
        "maintenance_seconds",
        "total_weight_degradation",
        "compared_merges",
        "agreeing_merges",
    ):
        total[key] = sum(p.get(key, 0) for p in pairs)
    total["maintenance_frequency"] = (
        total["maintenance_events"] / total["iterations"] if total["iterations"] else 0.0
    )
    events = total["maintenance_events"]
    total["mean_weight_degradation"] = total["total_weight_degradation"] / events if events else 0.0
    total["epochs"] = pairs[0].get("epochs", 0) if pairs else 0
    total["pass_seconds"] = sum(p.get("seconds", 0.0) for p in pairs)
    total["polish_seconds"] = sum(p.get("polish", {}).get("seconds", 0.0) for p in pairs)
    total["seconds"] = seconds
    total["pairs"] = pairs
    return total
