"""The polish against the budgeted pass alone, the exact SVM and the landmark methods of the same size.

For each data set (SETTINGS.md's C and gamma; pendigits with the polish issue's C = 8), in one
process and one run:

- ``BudgetSVC`` with ``solver`` bsgd and bsca at each budget B, 5 epochs, with ``polish=False``
  and with the polish (the default);
- ``KernelSVC`` (the exact SVM; skipped where it would take too long: the million-row set);
- random-landmark Nystroem + LinearSVC: scikit-learn's ``Nystroem(n_components=B)`` then
  ``LinearSVC`` (squared hinge, the same C), the usual kernel approximation;
- k-means landmarks + LinearSVC: the LLSVM of the BudgetedSVM toolbox, B centres of
  ``MiniBatchKMeans`` whitened by K_LL^-1/2 then ``LinearSVC`` (not for the text set, whose
  dense centres would take n_features values each).

Reported: test accuracy, fit seconds, predict seconds (the whole test set, best of 3).

Data: a9a, ijcnn1, w8a, cod-rna and pendigits from ../shared/data (SETTINGS.md's splits); a
million-row 4x4 checkerboard (uniform rows in [-1, 1]^2, label the parity of the cell of
side 1/2, C = 10, gamma = 16, B = 200, 2 epochs; 100,000 test rows); and the text-like set of
the polish issue (``sparse_text.text_like``: Zipf-distributed terms over 2^20 columns, 20,000
training and 5,000 test rows, 8% of a document's terms from its class's topic; C = 10,
gamma = 1, B = 200, one epoch).

    python benchmarks/polish.py --out docs/polish.md                  # about 15 minutes
    python benchmarks/polish.py --sets a9a ijcnn1 --budgets 100 500   # a part
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import SETTINGS, load  # noqa: E402
from _report import commit, machine, publish  # noqa: E402

ALL_SETS = ["a9a", "ijcnn1", "w8a", "cod-rna", "pendigits", "checkerboard-1M", "text-2^20"]


def checkerboard(n: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 2))
    y = ((np.floor(2 * X[:, 0]) + np.floor(2 * X[:, 1])) % 2).astype(int)
    return X, y


def data(name: str):
    """(X, y, Xt, yt, C, gamma, budgets, epochs) of a data set."""
    if name == "checkerboard-1M":
        X, y = checkerboard(1_000_000, 0)
        Xt, yt = checkerboard(100_000, 1)
        return X, y, Xt, yt, 10.0, 16.0, [200], 2
    if name == "text-2^20":
        from sparse_text import text_like

        X, y, Xt, yt = text_like(20_000, 5_000, 2**20, seed=0)
        return X, y, Xt, yt, 10.0, 1.0, [200], 1
    X, y, Xt, yt = load(name)
    s = SETTINGS[name]
    C = 8.0 if name == "pendigits" else s["C"]
    return X, y, Xt, yt, C, s["gamma"], None, 5


def best_predict(model, Xt, transform=None):
    times = []
    for _ in range(3):
        start = time.perf_counter()
        pred = model.predict(Xt if transform is None else transform(Xt))
        times.append(time.perf_counter() - start)
    return pred, min(times)


def landmark_svc(X, y, Xt, yt, C, gamma, B, kind, seed):
    """Nystroem (random landmarks) or k-means landmarks, whitened, then LinearSVC."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.kernel_approximation import Nystroem
    from sklearn.metrics.pairwise import rbf_kernel
    from sklearn.svm import LinearSVC

    start = time.perf_counter()
    if kind == "nystroem":
        feats = Nystroem(gamma=gamma, n_components=B, random_state=seed).fit(X)
        transform = feats.transform
    else:
        centres = MiniBatchKMeans(n_clusters=B, random_state=seed, n_init=1).fit(X).cluster_centers_
        evals, U = np.linalg.eigh(rbf_kernel(centres, centres, gamma=gamma))
        keep = evals > 1e-10 * evals.max()
        W = U[:, keep] / np.sqrt(evals[keep])

        def transform(A):
            return rbf_kernel(A, centres, gamma=gamma) @ W

    lin = LinearSVC(C=C, dual="auto", max_iter=5000, random_state=seed).fit(transform(X), y)
    fit = time.perf_counter() - start
    pred, predict = best_predict(lin, Xt, transform)
    return 100 * np.mean(pred == yt), fit, predict


def budgeted_rows(B: int, C: float, gamma: float, epochs: int, seed: int):
    """The table's budgeted rows at budget B, in order: (solver, polish, unfitted BudgetSVC)."""
    from budgetsvm import BudgetSVC

    for solver in ("bsgd", "bsca"):
        for polish in (False, True):
            yield solver, polish, BudgetSVC(
                C=C, gamma=gamma, budget=B, epochs=epochs, solver=solver, random_state=seed, polish=polish
            )


def run_set(name: str, budgets_arg, seed: int, rows: list) -> None:
    import warnings

    from budgetsvm import KernelSVC
    from sklearn.exceptions import ConvergenceWarning

    X, y, Xt, yt, C, gamma, budgets, epochs = data(name)
    budgets = budgets or budgets_arg
    shape = f"{X.shape[0]:,} x {X.shape[1]:,}"

    def add(method, B, acc, fit, predict, extra=""):
        rows.append(
            f"| {name} ({shape}) | {method} | {B} | {acc:.2f} | {fit:.2f} | {predict:.3f} | {extra} |"
        )
        print(rows[-1], flush=True)

    if name != "checkerboard-1M":
        start = time.perf_counter()
        exact = KernelSVC(C=C, gamma=gamma).fit(X, y)
        fit = time.perf_counter() - start
        pred, predict = best_predict(exact, Xt)
        add("KernelSVC (exact)", exact.support_vectors_.shape[0], 100 * np.mean(pred == yt), fit, predict)
    for B in budgets:
        for solver, polish, clf in budgeted_rows(B, C, gamma, epochs, seed):
            start = time.perf_counter()
            clf.fit(X, y)
            fit = time.perf_counter() - start
            pred, predict = best_predict(clf, Xt)
            extra = ""
            if polish:
                p = clf.fit_stats_["polish"]
                extra = f"{p['iterations']} Newton iterations, {p['seconds']:.2f} s"
            add(f"BudgetSVC {solver}{', polished' if polish else ''}", B, 100 * np.mean(pred == yt), fit, predict, extra)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            add("Nystroem + LinearSVC", B, *landmark_svc(X, y, Xt, yt, C, gamma, B, "nystroem", seed))
            if not sp.issparse(X) or X.shape[1] <= 4096:
                add("k-means landmarks + LinearSVC", B, *landmark_svc(X, y, Xt, yt, C, gamma, B, "kmeans", seed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=ALL_SETS, choices=ALL_SETS)
    ap.add_argument("--budgets", nargs="+", type=int, default=[100, 500])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import budgetsvm

    lines = [
        "# The polish: budgeted models at the exact SVM's accuracy",
        "",
        f"Command: `python benchmarks/polish.py {' '.join(sys.argv[1:])}`; commit {commit()}; "
        f"{machine()}; budgetsvm threads {budgetsvm.get_num_threads()}; seed {args.seed}; "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "Accuracy on the test rows (%); fit seconds (the polish included where polished); predict "
        "seconds for the whole test set (best of 3). B: the budget, the number of landmarks, or "
        "the exact SVM's support vectors. The method, its choices and its costs: "
        "`docs/polish_notes.md`; the budgeted rows on this build and an older one, alternated on "
        "one machine: `docs/polish_builds.md` (`benchmarks/polish_builds.py`).",
        "",
        "| data (train rows x columns) | method | B | accuracy | fit s | predict s | polish |",
        "|---|---|---|---|---|---|---|",
    ]
    rows: list = []
    for name in args.sets:
        run_set(name, args.budgets, args.seed, rows)
    publish(lines + rows, args.out)


if __name__ == "__main__":
    main()
