"""How long Ctrl-C takes to stop a fit, per solver and phase: SIGINT is sent to this process at
several moments of a fit, and the time from the signal to the KeyboardInterrupt is measured.

Each case is a fit that runs for seconds on 30,000 rows of 8 dense features (the exact solvers'
starts build gradients from thousands of kernel rows; SMO's first steps compute two rows of 2n
values each); the signal arrives at 0.05, 0.2, 0.5, 0.9 and 1.3 s. Timing goes to a report, never
into a test (tests/test_interrupt.py checks that the interrupt arrives, with its message).

Usage: python benchmarks/interrupt_latency.py [--out docs/interrupt_latency.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import threading
import time

import numpy as np

DELAYS = (0.05, 0.2, 0.5, 0.9, 1.3)


def cases():
    from budgetsvm import (
        BudgetSVC,
        KernelNuSVC,
        KernelNuSVR,
        KernelOneClassSVM,
        KernelSVC,
        KernelSVR,
    )

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30_000, 8))
    z = X[:, 0] + np.sin(3 * X[:, 1]) + 0.3 * rng.normal(size=len(X))
    y = z > 0
    return {
        "BudgetSVC bsgd (B=2,000, many epochs)": (
            lambda: BudgetSVC(budget=2000, epochs=50, random_state=0), lambda e: e.fit(X, y)),
        "BudgetSVC bsca (B=2,000, many epochs)": (
            lambda: BudgetSVC(budget=2000, epochs=50, solver="bsca", random_state=0),
            lambda e: e.fit(X, y)),
        "BudgetSVC polish (B=3,000)": (
            lambda: BudgetSVC(budget=3000, epochs=1, random_state=0, polish_tol=1e-12,
                              polish_max_iter=1000),
            lambda e: e.fit(X, y)),
        "KernelSVC alfpgm": (lambda: KernelSVC(C=10), lambda e: e.fit(X, y)),
        "KernelSVC smo": (lambda: KernelSVC(C=10, solver="smo"), lambda e: e.fit(X, y)),
        "KernelSVR smo": (lambda: KernelSVR(C=10, solver="smo"), lambda e: e.fit(X, z)),
        "KernelNuSVC smo": (lambda: KernelNuSVC(solver="smo"), lambda e: e.fit(X, y)),
        "KernelNuSVR alfpgm": (lambda: KernelNuSVR(C=10), lambda e: e.fit(X, z)),
        "KernelNuSVR smo": (lambda: KernelNuSVR(C=10, solver="smo"), lambda e: e.fit(X, z)),
        "KernelOneClassSVM smo": (lambda: KernelOneClassSVM(solver="smo"), lambda e: e.fit(X)),
    }


def latency(make, fit, delay: float):
    """Seconds from SIGINT to the KeyboardInterrupt, its message; None if the fit ended first."""
    sent = [0.0]

    def fire() -> None:
        sent[0] = time.perf_counter()
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(delay, fire)
    estimator = make()
    timer.start()
    try:
        fit(estimator)
    except KeyboardInterrupt as e:
        return time.perf_counter() - sent[0], str(e)
    finally:
        timer.cancel()
    return None, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the markdown report here")
    args = ap.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rows = []
    message = ""
    for name, (make, fit) in cases().items():
        got = [latency(make, fit, d) for d in DELAYS]
        seconds = [s for s, _ in got if s is not None]
        message = next((m for s, m in got if s is not None), message)
        rows.append((name, seconds, len(got) - len(seconds)))
        print(f"{name}: {', '.join(f'{s:.3f}' for s in seconds)}", flush=True)
    import budgetsvm

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [
        "# Ctrl-C: from the signal to the KeyboardInterrupt",
        "",
        f"`python benchmarks/interrupt_latency.py --out docs/interrupt_latency.md` at {commit}, "
        f"budgetsvm {budgetsvm.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores. 30,000 rows x 8 dense features; SIGINT at "
        f"{', '.join(f'{d} s' for d in DELAYS)} into the fit.",
        "",
        "| fit | latency per signal (s) | max (s) | ended before the signal |",
        "|---|---|---|---|",
    ]
    for name, seconds, finished in rows:
        worst = f"{max(seconds):.3f}" if seconds else "-"
        lines.append(f"| {name} | {', '.join(f'{s:.3f}' for s in seconds)} | {worst} | "
                     f"{finished} |")
    lines += ["", f"The message (one of them): `KeyboardInterrupt: {message}`", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
