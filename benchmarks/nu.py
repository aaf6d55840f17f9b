"""The nu machines (KernelNuSVC, KernelNuSVR) against scikit-learn's NuSVC / NuSVR (LIBSVM) and
oneDAL's (scikit-learn-intelex), in one run.

- nu-SVC on a9a (SETTINGS.md: gamma = 2^-7; nu = 0.3): agreement is the share of the 16,281
  test rows predicted as scikit-learn (LIBSVM) predicts them, for oneDAL's model too; then
  oneDAL's and KernelNuSVC (ALFPGM) at tol 1e-5, past LIBSVM's stop at its tol 1e-3, with
  their agreement with each other (how near two solvers' converged models are).
- nu-SVR on puma8nh, lowbwt, mv (SETTINGS.md: 80/20 split seed 0, at most 40,000 training rows,
  X and y standardised with the training rows' mean and std; C = 10, gamma = 1 / n_features;
  nu = 0.5) and fried (C = 10, gamma = 0.1, nu = 0.5; scikit-learn's NuSVR there only with
  --libsvm, it takes many minutes): R^2 on the test rows, and its difference from scikit-learn's
  (or oneDAL's where scikit-learn's is not run).

Ratio: the fit time over oneDAL's in the same run (over scikit-learn's where oneDAL is missing).
Both budgetsvm solvers run: ALFPGM (the default) and SMO (LIBSVM's steps).

    python benchmarks/nu.py --out docs/nu.md            # a9a, puma8nh, lowbwt: about 9 minutes
    python benchmarks/nu.py --parts mv fried --libsvm   # tens of minutes
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import DATA, regression_set  # noqa: E402
from _report import arguments, header, publish  # noqa: E402

SETS = ["a9a", "puma8nh", "lowbwt", "mv", "fried"]
#: mv and fried take tens of minutes (oneDAL's NuSVR alone ran past 8 minutes on mv here).
DEFAULT_SETS = ["a9a", "puma8nh", "lowbwt"]


def timed(f):
    start = time.perf_counter()
    out = f()
    return out, time.perf_counter() - start


def peers(kind: str, libsvm: bool):
    """The peers that run: (name, class) for oneDAL and scikit-learn (LIBSVM)."""
    out = []
    try:
        import sklearnex.svm as onedal

        out.append(("oneDAL", getattr(onedal, kind)))
    except ImportError:
        print("scikit-learn-intelex is not installed: no oneDAL rows", flush=True)
    if libsvm:
        import sklearn.svm as libsvm_svm

        out.append(("scikit-learn (LIBSVM)", getattr(libsvm_svm, kind)))
    return out


def classification(rows: list) -> None:
    import budgetsvm
    from budgetsvm.datasets import load_svmlight_file

    X, y = load_svmlight_file(DATA / "a9a" / "a9a.xz")
    Xt, yt = load_svmlight_file(DATA / "a9a" / "a9a.t.xz", n_features=X.shape[1])
    kw = dict(nu=0.3, gamma=2.0**-7)
    where = f"a9a ({X.shape[0]:,} x {X.shape[1]})"
    # (method, seconds, test predictions, SVs); LIBSVM's predictions are the reference.
    runs = []

    def run(method, make):
        model, seconds = timed(lambda: make().fit(X, y))
        runs.append((method, seconds, model.predict(Xt), len(model.support_)))
        print(f"{method}: {seconds:.2f} s", flush=True)

    onedal = None
    for name, cls in peers("NuSVC", True):
        onedal = cls if name == "oneDAL" else onedal
        run(f"{name} NuSVC", lambda cls=cls: cls(**kw))
    for solver in ("alfpgm", "smo"):
        run(f"KernelNuSVC ({solver})", lambda s=solver: budgetsvm.KernelNuSVC(solver=s, **kw))
    # Past LIBSVM's stop at its tol 1e-3: what the agreement with LIBSVM measures.
    converged = []
    if onedal is not None:
        run("oneDAL NuSVC, tol 1e-5", lambda: onedal(tol=1e-5, **kw))
        converged.append(runs[-1])
    run("KernelNuSVC (alfpgm), tol 1e-5", lambda: budgetsvm.KernelNuSVC(tol=1e-5, **kw))
    converged.append(runs[-1])
    ref = next((r[2] for r in runs if r[0].startswith("scikit")), None)
    base = runs[0][1]
    for method, seconds, pred, n_sv in runs:
        quality = [f"accuracy {100 * float((pred == yt).mean()):.2f}%"]
        if ref is not None and not method.startswith("scikit"):
            quality.append(f"{100 * float((pred == ref).mean()):.2f}% agree with LIBSVM")
        if len(converged) == 2 and method in (converged[0][0], converged[1][0]):
            other = converged[1] if method == converged[0][0] else converged[0]
            agree = 100 * float((pred == other[2]).mean())
            quality.append(f"{agree:.2f}% agree with {other[0]}")
        rows.append(f"| nu-SVC | {where} | {method} | {seconds:.2f} | {seconds / base:.3f} | "
                    f"{', '.join(quality)} | {n_sv:,} |")
        print(rows[-1], flush=True)


def regression(rows: list, name: str, libsvm: bool) -> None:
    import budgetsvm
    from sklearn.metrics import r2_score

    X, Xt, y, yt, gamma = regression_set(name)
    kw = dict(nu=0.5, C=10.0, gamma=gamma)
    where = f"{name} ({X.shape[0]:,} x {X.shape[1]})"
    ref_r2, base = None, None
    for peer, cls in peers("NuSVR", libsvm or name != "fried"):
        model, seconds = timed(lambda cls=cls: cls(**kw).fit(X, y))
        r2 = r2_score(yt, model.predict(Xt))
        ref_r2 = r2 if (peer.startswith("scikit") or ref_r2 is None) else ref_r2
        base = base or seconds
        rows.append(f"| nu-SVR | {where} | {peer} NuSVR | {seconds:.2f} | {seconds / base:.3f} | "
                    f"R^2 {r2:.4f} | {len(model.support_):,} |")
        print(rows[-1], flush=True)
    for solver in ("alfpgm", "smo"):
        model, seconds = timed(lambda s=solver: budgetsvm.KernelNuSVR(solver=s, **kw).fit(X, y))
        r2 = r2_score(yt, model.predict(Xt))
        rows.append(f"| nu-SVR | {where} | KernelNuSVR ({solver}) | {seconds:.2f} | "
                    f"{seconds / base:.3f} | R^2 {r2:.4f} ({r2 - ref_r2:+.4f}) | "
                    f"{len(model.support_):,} |")
        print(rows[-1], flush=True)


def main() -> None:
    ap = arguments(__doc__, "--parts", SETS, DEFAULT_SETS)
    ap.add_argument("--libsvm", action="store_true", help="also scikit-learn's NuSVR on fried")
    args = ap.parse_args()
    import budgetsvm

    warnings.filterwarnings("ignore")
    lines = header("nu-SVC and nu-SVR", "start") + [
        f"budgetsvm threads {budgetsvm.get_num_threads()}; {time.strftime('%Y-%m-%d')}. Fit "
        "seconds; ratio: fit time over the first peer's in the same run (oneDAL's); quality on "
        "the test rows, with the agreement with scikit-learn's (LIBSVM) predictions, or the R^2 "
        "difference from scikit-learn's (oneDAL's on fried without --libsvm). What each row "
        "runs: the docstring of `benchmarks/nu.py`.",
        "",
        "| task | data (train rows x columns) | method | fit s | ratio | quality | SVs |",
        "|---|---|---|---|---|---|---|",
    ]
    rows: list = []
    for part in args.parts:
        if part == "a9a":
            classification(rows)
        else:
            regression(rows, part, args.libsvm)
    publish(lines + rows, args.out)


if __name__ == "__main__":
    main()
