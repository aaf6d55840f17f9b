"""What every benchmark report states: the machine and the commit it measured."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path


def machine() -> str:
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown CPU"
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def arguments(doc: str, option: str, choices: list, default: list | None = None) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as the help, ``option`` (``--parts``,
    ``--sets``) picking what to run among ``choices`` (``default``: all of them), and ``--out``,
    a file the report is written to as well."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(option, nargs="+", default=choices if default is None else default, choices=choices)
    ap.add_argument("--out", type=Path, help="also write the report there (Markdown)")
    return ap


def header(title: str, load_when: str) -> list:
    """A report's first lines: its title, the machine, the commit, the load average (taken now,
    ``load_when`` says whether that is the run's start or end) and the command that made it
    (this process's script and arguments)."""
    load = os.getloadavg()[0]
    return [
        f"# {title}",
        "",
        f"Machine: {machine()}; commit {commit()}; load average at {load_when} {load:.2f}.",
        "",
        f"Command: `python benchmarks/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]) + "`",
        "",
    ]


def publish(lines: list, out: Path | None) -> None:
    """Prints the report's lines and writes them to ``out`` (when given, creating its folder)."""
    text = "\n".join(lines) + "\n"
    # Printed first: a report that took hours survives an ``out`` that cannot be written.
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
