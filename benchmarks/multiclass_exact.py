"""KernelSVC's one-vs-one fit against oneDAL's SVC (scikit-learn-intelex) on multi-class sets,
in one run: issue 61's item 3 ("the exact one-vs-one solver at <= 0.5x oneDAL on every
multi-class set you can find").

Sets: pendigits, shuttle and dna (../shared/data, C and gamma of benchmarks/_data.py; dna
C = 10, gamma = 0.01 as its LIBSVM row), hardmc at 100,000 rows (../shared/data/hardmc.py, C = 1,
gamma = 0.5), letters26 (26 classes drawn like pendigits, benchmarks/ovo_shared_rows.py) and
c4like, a synthetic stand-in for the dense 3-class set of 54,000 x 42 the issue names (42
features in {-1, 0, 1} like a board game's cells; the label the argmax of three noisy smooth
functions, classes about 43/35/21%; 48% of the rows end as support vectors), C = 1,
gamma = 1/42; c4like012, the same cells coded 0, 1, 2 (as an ordinal encoding gives them; the
same Gaussian model). Every fit runs in a process of its own; the two libraries alternate within each
round, and the table gives the median of the rounds' wall seconds and the ratio of the medians.

    python benchmarks/multiclass_exact.py --out docs/multiclass_exact.md [--rounds 3] [--sets ...]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _report import arguments, header, publish

SETS = ["pendigits", "shuttle", "dna", "letters26", "hardmc", "c4like", "c4like012"]
HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from _data import DATA, SETTINGS, load
name, kind = sys.argv[2], sys.argv[3]

def c4like(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 3, size=(n, 42)).astype(float) - 1.0
    W = np.random.default_rng(99).normal(size=(42, 30))
    V = np.random.default_rng(98).normal(size=(30, 3))
    f = np.tanh(X @ W / 4) @ V + rng.normal(scale=1.2, size=(n, 3)) + np.array([0.9, 0.0, -0.8])
    return X, f.argmax(1)

if name == "hardmc":
    sys.path.insert(0, str(DATA))
    from hardmc import make
    (X, y), (Xt, yt), C, g = make(100_000, 0), make(50_000, 1), 1.0, 0.5
elif name in ("c4like", "c4like012"):
    (X, y), (Xt, yt), C, g = c4like(54_000, 0), c4like(13_000, 1), 1.0, 1 / 42
    if name == "c4like012":
        X, Xt = X + 1.0, Xt + 1.0
elif name == "letters26":
    from ovo_shared_rows import letters26
    X, y, Xt, yt = letters26()
    C, g = 10.0, 2.0
elif name == "dna":
    from budgetsvm.datasets import load_svmlight_file
    X, y = load_svmlight_file(DATA / "dna/dna.scale.xz")
    Xt, yt = load_svmlight_file(DATA / "dna/dna.scale.t.xz", n_features=X.shape[1])
    C, g = 10.0, 0.01
else:
    X, y, Xt, yt = load(name)
    C, g = SETTINGS[name]["C"], SETTINGS[name]["gamma"]
if kind == "budgetsvm":
    import budgetsvm
    est = budgetsvm.KernelSVC(C=C, gamma=g)
else:
    from sklearnex.svm import SVC
    est = SVC(C=C, gamma=g)
t = time.perf_counter()
est.fit(X, y)
t = time.perf_counter() - t
acc = 100.0 * float((est.predict(Xt) == yt).mean())
print(json.dumps(dict(fit=t, acc=acc, n_sv=int(est.support_vectors_.shape[0]),
                      rows=int(X.shape[0]), width=int(X.shape[1]), classes=int(len(set(y))))))
"""


def run(name: str, kind: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE), name, kind], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"{name} {kind}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = arguments(__doc__, "--sets", SETS)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    started = time.perf_counter()
    lines = header(
        "KernelSVC against oneDAL on multi-class sets",
        "the start",
    )
    lines += [
        "| data set | rows x features, classes | budgetsvm fit (s) | oneDAL fit (s) | ratio | "
        "accuracy budgetsvm / oneDAL | SVs budgetsvm / oneDAL |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in a.sets:
        runs = {"budgetsvm": [], "onedal": []}
        for _ in range(a.rounds):
            for kind in runs:
                runs[kind].append(run(name, kind))
        ours, theirs = runs["budgetsvm"], runs["onedal"]
        t_ours = statistics.median(r["fit"] for r in ours)
        t_theirs = statistics.median(r["fit"] for r in theirs)
        r0, d0 = ours[0], theirs[0]
        lines.append(
            f"| {name} | {r0['rows']:,} x {r0['width']}, {r0['classes']} | {t_ours:.2f} | "
            f"{t_theirs:.2f} | {t_ours / t_theirs:.2f}x | {r0['acc']:.2f}% / {d0['acc']:.2f}% | "
            f"{r0['n_sv']:,} / {d0['n_sv']:,} |"
        )
        print(lines[-1], flush=True)
    lines += ["", f"Total benchmark time {time.perf_counter() - started:.0f} s."]
    publish(lines, a.out)


if __name__ == "__main__":
    main()
