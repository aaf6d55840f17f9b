"""A longer fuzz run of every decoder of outside bytes, reported to docs/fuzz.md.

1. The Rust harness (fuzz/decoders.rs): the LIBSVM parser, whole-file and chunked (plain and
   gzip, which must agree), and the BSGD stream state decoder; structure-aware mutations of
   valid seeds. ``FUZZ_SECONDS`` per target.
2. Model files (python/budgetsvm/modelfile.py), in a child process: byte flips, truncation and
   edits of the JSON header of saved models (BudgetSVC dense, sparse, multi-class, with
   probabilities; BudgetSVR; KernelSVC, KernelSVR, KernelOneClassSVM with poly, sigmoid and
   precomputed kernels);
   ``load_model`` must raise ModelFormatError (or OSError) or return a model that predicts.

Executions, crashes (panics, or a child that died) and outcome coverage (the distinct error
kinds reached, a proxy for the decoder paths exercised: this is not coverage-guided fuzzing).

    python benchmarks/fuzz.py --seconds 300 --out docs/fuzz.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

from _report import commit, machine, publish

ROOT = Path(__file__).resolve().parents[1]

MODEL_FUZZ = r"""
import io, json, random, sys, time, zipfile, collections, tempfile, os
import numpy as np, scipy.sparse as sp
from budgetsvm import (BudgetSVC, BudgetSVR, KernelOneClassSVM, KernelSVC, KernelSVR,
                       ModelFormatError, load_model)
seconds = float(sys.argv[1])
rng = np.random.default_rng(0)
X = rng.normal(size=(300, 4)); y3 = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)
seeds = []
tmp = tempfile.mkdtemp()
for k, (XX, yy, kw) in enumerate([
    (X, (X[:, 0] > 0).astype(int), {}),
    (X, y3, dict(probability=True)),
    (sp.csr_matrix(np.where(np.abs(X) > 1, X, 0)), y3.astype(str), dict(sv_storage="sparse")),
]):
    path = os.path.join(tmp, f"seed{k}.model")
    BudgetSVC(budget=20, random_state=0, **kw).fit(XX, yy).save(path)
    seeds.append(open(path, "rb").read())
K = X @ X.T
for k, (est, XX, yy) in enumerate([
    (BudgetSVR(budget=20, random_state=0), X, X[:, 0]),
    (KernelSVC(kernel="poly", degree=2, probability=True, random_state=0), X, y3),
    (KernelSVR(kernel="sigmoid", gamma=0.1), sp.csr_matrix(np.where(np.abs(X) > 1, X, 0)),
     X[:, 1]),
    (KernelOneClassSVM(kernel="precomputed", nu=0.2), K, None),
]):
    path = os.path.join(tmp, f"exact{k}.model")
    est.fit(XX, yy).save(path)
    seeds.append(open(path, "rb").read())

def header_mutation(data, r):
    z = zipfile.ZipFile(io.BytesIO(data))
    h = json.loads(z.read("header.json"))
    keys = [("arrays", "support_vectors"), ("arrays", "dual_coef"), ("classes", "dtype"),
            ("classes", "values"), ("kernel", "gamma"), ("n_features",), ("version",),
            ("probability",), ("class_weight",), ("params",), ("task",), ("estimator",),
            ("intercept",), ("kernel", "name"), ("kernel", "degree"), ("kernel", "coef0"),
            ("arrays", "support"), ("exact", "n_support"), ("exact", "shape_fit"),
            ("exact", "n_iter"), ("exact", "dual_objective"), ("exact", "fit_status")]
    path = r.choice(keys)
    values = [None, -1, 0, 2**63, 1e308, float("nan"), "x", [], [1, 2], {"a": 1}, "<U99999999",
              [10**12, 4], [3, 10**9]]
    target = h
    for p in path[:-1]:
        target = target.setdefault(p, {}) if isinstance(target, dict) else {}
    if isinstance(target, dict):
        target[path[-1]] = r.choice(values)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as w:
        for name in z.namelist():
            w.writestr(name, json.dumps(h) if name == "header.json" else z.read(name))
    return out.getvalue()

r = random.Random(1)
outcomes = collections.Counter()
start, n = time.time(), 0
path = os.path.join(tmp, "case.model")
while time.time() - start < seconds:
    data = bytearray(r.choice(seeds))
    kind = r.randrange(3)
    if kind == 0:
        for _ in range(r.randrange(1, 4)):
            data[r.randrange(len(data))] ^= 1 << r.randrange(8)
    elif kind == 1:
        data = data[: r.randrange(len(data))]
    else:
        data = bytearray(header_mutation(bytes(data), r))
    open(path, "wb").write(bytes(data))
    n += 1
    try:
        clf = load_model(path)
        clf.predict(np.zeros((2, clf.n_features_in_)))
        outcomes["ok"] += 1
    except ModelFormatError as e:
        outcomes["ModelFormatError: " + str(e).split(": ", 1)[-1].split("(")[0][:60]] += 1
    except OSError:
        outcomes["OSError"] += 1
    except ValueError as e:  # a loaded model refusing its input, e.g. a wrong width
        outcomes["ValueError at predict"] += 1
print(json.dumps(dict(executions=n, outcomes=outcomes, seconds=time.time() - start)))
"""


def rust_fuzz(seconds: float) -> str:
    env = {**os.environ, "FUZZ_SECONDS": str(seconds)}
    run = subprocess.run(
        ["cargo", "test", "--release", "--test", "fuzz", "--", "--nocapture", "--test-threads=1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    # libtest prints "test NAME ... " and the test's own output on one line.
    lines = []
    for line in run.stdout.splitlines():
        if "fuzz " in line:
            lines.append(line[line.index("fuzz ") :])
        elif line.startswith("  "):
            lines.append(line)
    status = "passed" if run.returncode == 0 else f"FAILED (exit {run.returncode})"
    return "\n".join(lines) + f"\n\n(cargo test {status})"


def model_fuzz(seconds: float) -> str:
    run = subprocess.run(
        [sys.executable, "-c", MODEL_FUZZ, str(seconds)], capture_output=True, text=True
    )
    if run.returncode != 0:
        return f"CRASH: the child exited with {run.returncode}\n{run.stderr[-2000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    lines = [
        f"model files: {result['executions']} executions in {result['seconds']:.1f} s, "
        f"0 crashes, {len(result['outcomes'])} distinct outcomes"
    ]
    for k, v in sorted(result["outcomes"].items()):
        lines.append(f"  {v:>9}  {k}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="per target")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rust = rust_fuzz(args.seconds)
    models = model_fuzz(args.seconds)
    publish(
        [
            "# Fuzzing the decoders of outside bytes",
            "",
            f"`python benchmarks/fuzz.py --seconds {args.seconds:g} --out docs/fuzz.md`, "
            f"{datetime.date.today()}, commit {commit()}, {machine()}. Structure-aware mutation "
            "of valid seeds (not coverage-guided); outcome coverage = the distinct results "
            "reached (ok, or each kind of error). A panic or a dead child is a crash.",
            "",
            "## LIBSVM parser and BSGD stream state (Rust, fuzz/decoders.rs)",
            "",
            "```",
            rust,
            "```",
            "",
            "## Model files (Python, budgetsvm.modelfile)",
            "",
            "```",
            models,
            "```",
        ],
        args.out,
    )


if __name__ == "__main__":
    main()
