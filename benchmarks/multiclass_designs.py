"""Multi-class designs on a budget, prototyped from the engine's parts, on ../shared/data/hardmc.py
(issue 61): what each costs and reaches before one is built into BudgetSVC.

Designs (each fit in its own process; C=1, gamma=0.5, one epoch, seed 0; test make(50_000, 1)):
  shared     BudgetSVC as it is: one budget of B SVs with K coefficients each (Crammer-Singer BSGD),
             the polish over all K one-vs-rest outputs.
  ovo        one BudgetSVC per class pair on its two classes' rows, B / n_pairs SVs each, polished
             per pair; predicted from one kernel block over the union of their SVs.
  pools-X    per-class pools of B / K points (X: random rows of the class, k-means centroids of
             them, or the positive SVs of a one-vs-rest BSGD run); every pair's coefficients solved
             exactly (the polish) over the pools of its two classes on its rows. An SV of class a
             serves all pairs (a, .), as LIBSVM's one-vs-one shares rows: one kernel block of B
             columns predicts all pairs.

Usage: python benchmarks/multiclass_designs.py [--rows 100000] [--budget 3000]
       [--designs shared ovo pools-random pools-kmeans pools-ovr] [--out docs/multiclass_notes.md]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "shared", "data")

CHILD = r"""
import itertools, json, sys, time, warnings
from concurrent.futures import ThreadPoolExecutor
import numpy as np
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
from hardmc import make
from budgetsvm import BudgetSVC, _budgetsvm
design, n, B = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
X, y = make(n, seed=0)
Xt, yt = make(50_000, seed=1)
K = 6
pairs = list(itertools.combinations(range(K), 2))
params = dict(C=1.0, gamma=0.5, epochs=1, random_state=0)

def vote(dec):
    votes = np.zeros((dec.shape[0], K))
    for k, (a, c) in enumerate(pairs):
        wins = dec[:, k] > 0
        votes[:, c] += wins
        votes[:, a] += ~wins
    return votes.argmax(axis=1)

def predict_pairs(S, coef, intercept):
    return vote(_budgetsvm.decision_function(np.ascontiguousarray(S), coef, 0.5, Xt,
                                             intercept=intercept))

t0 = time.perf_counter()
if design == "shared":
    model = BudgetSVC(budget=B, **params).fit(X, y)
    fit = time.perf_counter() - t0
    t1 = time.perf_counter(); pred = model.predict(Xt); predict = time.perf_counter() - t1
    n_sv = model.support_vectors_.shape[0]
elif design == "ovo":
    def fit_pair(pair):
        rows = np.isin(y, pair)
        return BudgetSVC(budget=max(2, B // len(pairs)), n_jobs=1, **params).fit(X[rows], y[rows])
    with ThreadPoolExecutor(2) as pool:
        models = list(pool.map(fit_pair, pairs))
    fit = time.perf_counter() - t0
    S = np.vstack([m.support_vectors_ for m in models])
    coef = np.zeros((len(S), len(pairs))); intercept = np.zeros(len(pairs)); at = 0
    for k, m in enumerate(models):
        s = m.support_vectors_.shape[0]
        coef[at:at + s, k] = m.dual_coef_[0]; intercept[k] = m.intercept_[0]; at += s
    t1 = time.perf_counter(); pred = predict_pairs(S, coef, intercept)
    predict = time.perf_counter() - t1
    n_sv = len(S)
else:
    how = design.split("-", 1)[1]
    per = B // K
    rng = np.random.default_rng(0)
    if how == "random":
        pools = [X[rng.choice(np.flatnonzero(y == a), per, replace=False)] for a in range(K)]
    elif how == "kmeans":
        from sklearn.cluster import MiniBatchKMeans
        pools = [MiniBatchKMeans(per, random_state=0, n_init=1, batch_size=4096)
                 .fit(X[y == a]).cluster_centers_ for a in range(K)]
    else:
        def positives(a):
            m = BudgetSVC(budget=2 * per, polish=False, n_jobs=1, **params).fit(X, (y == a) * 1)
            keep = m.dual_coef_[0] > 0
            order = np.argsort(-np.abs(m.dual_coef_[0][keep]))[:per]
            return m.support_vectors_[keep][order]
        with ThreadPoolExecutor(2) as pool:
            pools = list(pool.map(positives, range(K)))
    at = np.cumsum([0] + [len(p) for p in pools])
    def solve_pair(pair):
        a, c = pair
        rows = np.isin(y, pair)
        basis = np.vstack([pools[a], pools[c]])
        return _budgetsvm.polish(
            np.ascontiguousarray(X[rows]), np.ascontiguousarray((y[rows] == c).astype(np.uint32)),
            2, support_vectors=np.ascontiguousarray(basis), coef=np.zeros((len(basis), 1)),
            gamma=0.5, c=1.0, tol=1e-5, max_iter=50, cache_size=1024.0, intercept=np.zeros(1))
    with ThreadPoolExecutor(2) as pool:
        solved = list(pool.map(solve_pair, pairs))
    fit = time.perf_counter() - t0
    S = np.vstack(pools)
    coef = np.zeros((len(S), len(pairs))); intercept = np.zeros(len(pairs))
    for k, ((a, c), r) in enumerate(zip(pairs, solved)):
        cf = np.asarray(r["coef"])[:, 0]
        coef[at[a]:at[a + 1], k] = cf[:len(pools[a])]
        coef[at[c]:at[c + 1], k] = cf[len(pools[a]):]
        intercept[k] = r["intercept"][0]
    t1 = time.perf_counter(); pred = predict_pairs(S, coef, intercept)
    predict = time.perf_counter() - t1
    n_sv = len(S)
print(json.dumps(dict(acc=100.0 * float((pred == yt).mean()), fit=fit, predict=predict, n_sv=n_sv)))
"""


def run(design: str, rows: int, budget: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, DATA, design, str(rows), str(budget)],
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{design}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--budget", type=int, nargs="+", default=[3000])
    ap.add_argument("--designs", nargs="+",
                    default=["shared", "ovo", "pools-random", "pools-kmeans", "pools-ovr"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = ["| design | B | accuracy % | fit s | predict 50,000 s | SVs |", "|---|---|---|---|---|---|"]
    for budget, design in itertools.product(args.budget, args.designs):
        r = run(design, args.rows, budget)
        lines.append(f"| {design} | {budget} | {r['acc']:.2f} | {r['fit']:.1f} | "
                     f"{r['predict']:.2f} | {r['n_sv']} |")
        print(lines[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    text = (f"`python benchmarks/multiclass_designs.py --rows {args.rows} --budget "
            f"{' '.join(map(str, args.budget))} --designs {' '.join(args.designs)}` at {commit}, "
            f"{os.cpu_count()} cores:\n\n" + "\n".join(lines) + "\n")
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
