"""LIBSVM reader: budgetsvm (Rust, parallel) vs scikit-learn's load_svmlight_file, in one run.

Times both on the compressed files in ../shared/data and on their decompressed text (written to a
temporary directory), best of --repeat runs, checks the outputs are equal, and reports the ratio.

    python benchmarks/reader.py --out docs/reader.md
"""

from __future__ import annotations

import argparse
import bz2
import lzma
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_svmlight_file as sk_load

sys.path.insert(0, str(Path(__file__).resolve().parent))
import budgetsvm  # noqa: E402
from _data import DATA  # noqa: E402
from _report import commit as _commit  # noqa: E402
from _report import machine, publish  # noqa: E402
from budgetsvm.datasets import load_svmlight_file  # noqa: E402

FILES = ["a9a/a9a.xz", "a9a/a9a.t.xz", "ijcnn1/ijcnn1.bz2", "ijcnn1/ijcnn1.t.bz2", "w8a/w8a.xz"]


def best_of(f, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def sk_compressed(path: Path):
    opener = lzma.open if path.suffix == ".xz" else bz2.open
    with opener(path) as fh:
        return sk_load(fh, zero_based=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    lines = [
        "# LIBSVM reader: budgetsvm vs scikit-learn",
        "",
        f"Command: `python benchmarks/reader.py {' '.join(sys.argv[1:])}`  ",
        f"Machine: {machine()}; threads: {budgetsvm.get_num_threads()}; budgetsvm "
        f"{budgetsvm.__version__} (commit {_commit()}); best of {args.repeat}.  ",
        "scikit-learn reads compressed files through Python's lzma/bz2 file objects; both outputs "
        "are checked equal (labels, and the matrices as dense arrays).",
        "",
        "| file | rows | nnz | input | scikit-learn s | budgetsvm s | speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name in FILES:
            path = DATA / name
            plain = Path(tmp) / (path.stem + ".txt")
            opener = lzma.open if path.suffix == ".xz" else bz2.open
            with opener(path) as fh:
                plain.write_bytes(fh.read())
            for label, ours_path, theirs in (
                ("compressed", path, lambda p=path: sk_compressed(p)),
                ("plain text", plain, lambda p=plain: sk_load(str(p), zero_based=False)),
            ):
                t_sk, (Xs, ys) = best_of(theirs, args.repeat)
                t_us, (Xu, yu) = best_of(lambda p=ours_path: load_svmlight_file(p), args.repeat)
                width = max(Xs.shape[1], Xu.shape[1])
                assert np.array_equal(ys, yu)
                assert Xs.nnz == Xu.nnz
                Xs.resize(Xs.shape[0], width)
                Xu.resize(Xu.shape[0], width)
                assert (Xs != Xu).nnz == 0
                lines.append(
                    f"| {name} | {Xu.shape[0]} | {Xu.nnz} | {label} | {t_sk:.3f} | {t_us:.3f} "
                    f"| {t_sk / t_us:.1f}x |"
                )
                print(lines[-1], flush=True)
    publish(lines, args.out)


if __name__ == "__main__":
    main()
