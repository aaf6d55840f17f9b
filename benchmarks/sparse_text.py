"""High-dimensional sparse (text-like) data: budgetsvm against the usual peers.

Data: a generator of text-like TF-IDF matrices (``text_like`` below, documented there): documents
of Zipf-distributed terms over a vocabulary of ``n_features`` terms, two classes that differ in
how often they use a few hundred topic terms, TF-IDF weighting fitted on the training rows and
L2-normalised rows, as scikit-learn's ``TfidfVectorizer`` would produce from real text. Every
configuration is generated once and cached (``--cache-dir``, default a temporary folder; never the
repository).

Methods, each fitted and evaluated in a fresh process so that its peak resident set size
(``ru_maxrss``) is its own: ``BudgetSVC`` (bsgd and bsca at B = 100 and 500), ``KernelSVC``
(ALFPGM), scikit-learn's ``SVC``, ``LinearSVC`` and ``Nystroem`` + ``LinearSVC``. Reported: fit
and predict seconds, peak RSS of the process (and of the process with only the data and the libraries loaded), test
accuracy, number of support vectors (basis size for Nystroem), and the fit-time ratio to SVC.

A method whose fit ran past ``--timeout`` on a configuration is not run on larger ones; a method
whose estimated time (quadratic in the rows for the exact solvers, linear otherwise, from its
largest finished run) exceeds the timeout is skipped and marked so.

    nice -n 5 python benchmarks/sparse_text.py --out docs/sparse.md
    python benchmarks/sparse_text.py --headline --out docs/sparse_headline.md   # issue 9's case

``--headline`` runs the case of issue 9: 5,000 rows x 1,000,000 features, 50 non-zeros a row,
C = 1, gamma = 0.5, BudgetSVC(budget=200, epochs=1) and KernelSVC against SVC.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import commit, machine, publish  # noqa: E402

ZIPF_EXPONENT = 1.07
TOPIC_TERMS = 300  # per data set: 150 per class
TOPIC_RANKS = (50, 20_000)  # topic terms are drawn from this band of frequency ranks


def text_like(
    n_rows: int,
    n_test: int,
    n_features: int,
    *,
    mean_terms: float = 50.0,
    topic_share: float = 0.08,
    label_noise: float = 0.03,
    seed: int = 0,
) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix, np.ndarray]:
    """Text-like TF-IDF data: (X_train, y_train, X_test, y_test), labels -1/+1.

    - Vocabulary: ``n_features`` terms whose corpus frequencies follow Zipf's law (probability of
      the term of rank r proportional to r**-1.07); ranks are assigned to columns by a random
      permutation, as a real vocabulary's column order is unrelated to frequency.
    - Labels: two balanced classes. Each class has 150 topic terms, drawn without replacement from
      the frequency ranks 50..20,000 (capped at the vocabulary size); the two sets are disjoint,
      so the label depends on 300 terms.
    - Documents: a length in tokens drawn from a log-normal distribution (tuned so that a row
      has about ``mean_terms`` distinct terms); each token is a topic term of the document's
      class (uniformly) with probability ``topic_share``, else a background term drawn by
      Zipf frequency. Term counts are summed per document.
    - Weights: sublinear TF-IDF (1 + log count) x smoothed idf fitted on the training rows
      (scikit-learn's ``TfidfTransformer(sublinear_tf=True)``), rows L2-normalised.
    - ``label_noise``: that fraction of labels is flipped at random (real labels are noisy).
    """
    from sklearn.feature_extraction.text import TfidfTransformer

    rng = np.random.default_rng(seed)
    n = n_rows + n_test
    ranks = np.arange(1, n_features + 1, dtype=np.float64)
    cdf = np.cumsum(ranks**-ZIPF_EXPONENT)
    cdf /= cdf[-1]
    column_of_rank = rng.permutation(n_features)
    lo, hi = TOPIC_RANKS[0], min(TOPIC_RANKS[1], n_features)
    if hi - lo < TOPIC_TERMS:
        lo = 0
    topic = column_of_rank[lo + rng.choice(hi - lo, TOPIC_TERMS, replace=False)]
    topics = topic.reshape(2, -1)
    y = np.where(rng.random(n) < 0.5, 1, -1)

    # Distinct terms grow sublinearly with tokens under Zipf's law, by a ratio that depends on the
    # vocabulary: a pilot of 1,000 documents calibrates the token count for ``mean_terms``.
    def zipf_terms(size: int) -> np.ndarray:
        return column_of_rank[np.searchsorted(cdf, rng.random(size))]

    def distinct_per_doc(tokens_per_doc: int) -> float:
        pilot = zipf_terms(1_000 * tokens_per_doc).reshape(1_000, tokens_per_doc)
        pilot.sort(axis=1)
        return float(np.mean(1 + np.sum(pilot[:, 1:] != pilot[:, :-1], axis=1)))

    tokens_per_term = 1.0
    for _ in range(3):
        guess = max(1, int(round(tokens_per_term * mean_terms)))
        tokens_per_term = guess / distinct_per_doc(guess)
    lengths = np.maximum(
        1,
        rng.lognormal(np.log(tokens_per_term * mean_terms) - 0.125, 0.5, size=n).astype(np.int64),
    )
    doc = np.repeat(np.arange(n), lengths)
    tokens = zipf_terms(len(doc))
    is_topic = rng.random(len(doc)) < topic_share
    cls = (y[doc] == 1).astype(np.int64)
    topic_pick = topics[cls[is_topic], rng.integers(0, topics.shape[1], size=int(is_topic.sum()))]
    tokens[is_topic] = topic_pick
    counts = sp.coo_matrix(
        (np.ones(len(doc)), (doc, tokens)), shape=(n, n_features)
    ).tocsr()  # duplicates summed
    counts.sum_duplicates()
    flip = rng.random(n) < label_noise
    y = np.where(flip, -y, y)
    tfidf = TfidfTransformer(sublinear_tf=True).fit(counts[:n_rows])
    X = tfidf.transform(counts).tocsr()
    X.sort_indices()
    return X[:n_rows], y[:n_rows], X[n_rows:], y[n_rows:]


def cached_data(args: argparse.Namespace, n_rows: int, n_features: int, mean_terms: float) -> Path:
    """Path of the cached .npz for one configuration (generated on first use)."""
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"text_{n_rows}x{n_features}_nnz{mean_terms:g}_s{args.seed}.npz"
    if not path.exists():
        # In a process of its own: Linux keeps a process's peak RSS across exec, so a parent
        # that had generated the data would lend its size to every method's measurement.
        cmd = [
            sys.executable,
            __file__,
            "--child-generate",
            str(path),
            "--n-test",
            str(args.n_test),
        ]
        cmd += ["--seed", str(args.seed), "--rows", str(n_rows), "--features", str(n_features)]
        cmd += ["--nnz", str(mean_terms)]
        subprocess.run(cmd, check=True)
    return path


def generate(path: Path, n_rows: int, n_test: int, n_features: int, mean_terms: float, seed: int):
    """Writes the .npz of one configuration."""
    if not path.exists():
        t0 = time.perf_counter()
        Xtr, ytr, Xte, yte = text_like(n_rows, n_test, n_features, mean_terms=mean_terms, seed=seed)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(
            tmp,
            tr_data=Xtr.data,
            tr_indices=Xtr.indices,
            tr_indptr=Xtr.indptr,
            ytr=ytr,
            te_data=Xte.data,
            te_indices=Xte.indices,
            te_indptr=Xte.indptr,
            yte=yte,
            n_features=n_features,
        )
        tmp.rename(path)
        print(
            f"generated {n_rows} x {n_features} (+{n_test} test rows, "
            f"{Xtr.nnz / n_rows:.1f} nnz/row) in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )


def load(path: Path):
    z = np.load(path)
    d = int(z["n_features"])
    Xtr = sp.csr_matrix((z["tr_data"], z["tr_indices"], z["tr_indptr"]), shape=(len(z["ytr"]), d))
    Xte = sp.csr_matrix((z["te_data"], z["te_indices"], z["te_indptr"]), shape=(len(z["yte"]), d))
    return Xtr, z["ytr"], Xte, z["yte"]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_estimator(method: str, C: float, gamma: float, epochs: int):
    """The estimator of one method name: bsgd-100, bsca-500, kernelsvc, svc, linearsvc, nystroem."""
    if method.startswith(("bsgd", "bsca")):
        from budgetsvm import BudgetSVC

        solver, budget = method.split("-")
        return BudgetSVC(
            C=C, gamma=gamma, budget=int(budget), solver=solver, epochs=epochs, random_state=0
        )
    if method == "kernelsvc":
        from budgetsvm import KernelSVC

        return KernelSVC(C=C, gamma=gamma)
    if method == "svc":
        from sklearn.svm import SVC

        return SVC(C=C, gamma=gamma, cache_size=200)
    if method == "linearsvc":
        from sklearn.svm import LinearSVC

        return LinearSVC(C=C)
    if method.startswith("nystroem"):
        from sklearn.kernel_approximation import Nystroem
        from sklearn.pipeline import make_pipeline
        from sklearn.svm import LinearSVC

        components = int(method.split("-")[1]) if "-" in method else 500
        return make_pipeline(
            Nystroem(gamma=gamma, n_components=components, random_state=0), LinearSVC(C=C)
        )
    raise ValueError(f"unknown method {method!r}")


def run_child(args: argparse.Namespace) -> None:
    """One method on one cached data set, in this process; prints one JSON line."""
    # The estimator first: its imports (scikit-learn, scipy) count as "data only" too.
    est = make_estimator(args.child_method, args.C, args.gamma, args.epochs)
    Xtr, ytr, Xte, yte = load(Path(args.child_data))
    rss_data = peak_rss_mb()
    t0 = time.perf_counter()
    est.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = est.predict(Xte)
    predict_s = time.perf_counter() - t0
    model = est[-1] if hasattr(est, "steps") else est
    sv = getattr(model, "support_vectors_", None)
    if sv is None:
        size = getattr(getattr(est, "steps", [[None, None]])[0][1], "n_components", None)
        sv_kind = "-"
    else:
        size = sv.shape[0]
        sv_kind = "CSR" if sp.issparse(sv) else "dense"
    stats = getattr(model, "fit_stats_", None) or {}
    print(
        json.dumps(
            {
                "fit_s": fit_s,
                "predict_s": predict_s,
                "accuracy": float(np.mean(pred == yte)),
                "rss_mb": peak_rss_mb(),
                "rss_data_mb": rss_data,
                "size": None if size is None else int(size),
                "sv_kind": sv_kind,
                "mean_sv_nnz": stats.get("mean_sv_nnz"),
            }
        )
    )


def run_method(args, data: Path, method: str, timeout: float) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child-data",
        str(data),
        "--child-method",
        method,
        "--C",
        str(args.C),
        "--gamma",
        str(args.gamma),
        "--epochs",
        str(args.epochs),
    ]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout (> {timeout:.0f} s)", "wall_s": time.perf_counter() - t0}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": f"failed: {last[:160]}", "wall_s": time.perf_counter() - t0}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["status"] = "ok"
    return res


EXACT = {"kernelsvc", "svc"}


def estimate(method: str, done: dict, n_rows: int, n_features: int) -> float | None:
    """Seconds expected for (method, rows) from the largest finished run at <= these features."""
    runs = [
        (r, f, res["fit_s"])
        for (m, r, f), res in done.items()
        if m == method and res.get("status") == "ok" and f <= n_features
    ]
    if not runs:
        return None
    r, _, t = max(runs)
    power = 2.0 if method in EXACT else 1.0
    return t * (n_rows / r) ** power


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def report_table(rows: list[dict]) -> list[str]:
    lines = [
        "| method | fit s | predict s | fit / SVC | peak RSS MB | RSS with data only MB | "
        "accuracy % | SVs (basis) | SV storage | mean SV nnz | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    svc = next((r for r in rows if r["method"] == "svc" and r.get("status") == "ok"), None)
    for r in rows:
        ok = r.get("status") == "ok"
        ratio = r["fit_s"] / svc["fit_s"] if ok and svc else None
        lines.append(
            f"| {r['method']} | {fmt(r.get('fit_s'))} | {fmt(r.get('predict_s'))} | "
            f"{fmt(ratio, '.3f')} | {fmt(r.get('rss_mb'), '.0f')} | "
            f"{fmt(r.get('rss_data_mb'), '.0f')} | "
            f"{fmt(100 * r['accuracy'] if ok else None)} | {r.get('size') or '-'} | "
            f"{r.get('sv_kind', '-')} | {fmt(r.get('mean_sv_nnz'), '.1f')} | {r['status']} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--features", type=int, nargs="+", default=[20_000, 200_000, 1_000_000, 4_000_000]
    )
    ap.add_argument("--rows", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--n-test", type=int, default=10_000)
    ap.add_argument("--nnz", type=float, default=50.0, help="mean distinct terms per row")
    ap.add_argument(
        "--methods",
        nargs="+",
        default=[
            "bsgd-100",
            "bsgd-500",
            "bsca-100",
            "bsca-500",
            "kernelsvc",
            "svc",
            "linearsvc",
            "nystroem-500",
        ],
    )
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--gamma", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per fit")
    ap.add_argument(
        "--cache-dir", default=os.path.join(tempfile.gettempdir(), "budgetsvm_sparse_text")
    )
    ap.add_argument("--headline", action="store_true", help="issue 9's 5,000 x 1,000,000 case")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child-data", help=argparse.SUPPRESS)
    ap.add_argument("--child-method", help=argparse.SUPPRESS)
    ap.add_argument("--child-generate", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_data:
        run_child(args)
        return
    if args.child_generate:
        generate(
            Path(args.child_generate),
            args.rows[0],
            args.n_test,
            args.features[0],
            args.nnz,
            args.seed,
        )
        return
    if args.headline:
        args.rows, args.features, args.nnz, args.C, args.gamma, args.epochs = (
            [5_000],
            [1_000_000],
            50.0,
            1.0,
            0.5,
            1,
        )
        args.n_test = 1_000
        args.methods = ["bsgd-200", "kernelsvc", "svc"]
    load_avg = os.getloadavg()
    lines = [
        "# Sparse text-like data: budgetsvm against its peers",
        "",
        f"Machine: {machine()}; commit {commit()}; load average at start "
        f"{load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}.",
        "",
        "Command: `python benchmarks/sparse_text.py " + " ".join(sys.argv[1:]) + "`",
        "",
        f"Data: `text_like` (Zipf exponent {ZIPF_EXPONENT}, {TOPIC_TERMS} topic terms, about "
        f"{args.nnz:g} non-zeros a row, TF-IDF, L2-normalised rows; {args.n_test} test rows). "
        f"C = {args.C:g}, gamma = {args.gamma:g}; BudgetSVC epochs = {args.epochs}. Each fit in a "
        "fresh process; peak RSS is the whole process (Python, numpy, scipy, scikit-learn and "
        "the data included), next to the same process with only the data and the libraries loaded.",
        "",
    ]
    done: dict = {}
    for n_rows in args.rows:
        for n_features in args.features:
            data = cached_data(args, n_rows, n_features, args.nnz)
            rows = []
            for method in args.methods:
                est = estimate(method, done, n_rows, n_features)
                stopped = any(
                    m == method
                    and r <= n_rows
                    and f <= n_features
                    and res["status"].startswith("timeout")
                    for (m, r, f), res in done.items()
                )
                if stopped or (est is not None and est > args.timeout):
                    why = "a smaller case timed out" if stopped else f"estimated {est:.0f} s"
                    res = {"status": f"skipped ({why})"}
                else:
                    res = run_method(args, data, method, args.timeout)
                res["method"] = method
                done[(method, n_rows, n_features)] = res
                rows.append(res)
                print(f"{n_rows} x {n_features} {method}: {json.dumps(res)}", file=sys.stderr)
            lines += [f"## {n_rows:,} rows x {n_features:,} features", ""]
            lines += report_table(rows) + [""]
            if args.out:
                args.out.write_text("\n".join(lines) + "\n")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
