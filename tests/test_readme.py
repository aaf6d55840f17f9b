"""Every code block of the README (and every Python example in the pages of the documentation
site) runs as written and prints what the text says it prints.

Convention in the README: a line that prints a figure ends with ``# prints EXPECTED; remark``.
EXPECTED is the printed line with ``~`` before each number that may vary (within 1% or 0.01,
whichever is larger); other numbers and the words between them must match exactly. Python
blocks run in a fresh interpreter each; bash blocks line by line (blocks that install are what
CI itself runs, the tests and the docs build; of the first only ``budgetsvm demo`` runs here).
Blocks run in a scratch directory whose ``../shared`` is the shared data, as the README's paths
assume.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHARED = ROOT.parent / "shared"
NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"


def site_blocks() -> List[Tuple[str, int, str]]:
    """(file, first line number, code) of each ``.. code-block:: python`` of the docs site."""
    out = []
    for page in sorted((ROOT / "docs" / "site").glob("*.rst")):
        lines = page.read_text().splitlines()
        k = 0
        while k < len(lines):
            if lines[k].strip() == ".. code-block:: python":
                k += 1
                while k < len(lines) and not lines[k].strip():
                    k += 1
                start, code = k + 1, []
                while k < len(lines) and (lines[k].startswith("   ") or not lines[k].strip()):
                    code.append(lines[k][3:])
                    k += 1
                out.append((page.name, start, "\n".join(code).strip() + "\n"))
            else:
                k += 1
    return out


def fenced_blocks(lang: str) -> List[Tuple[int, str]]:
    """(first line number, code) of each ```lang block."""
    out, current, start = [], None, 0
    for no, line in enumerate(README.read_text().splitlines(), 1):
        if current is None and line.strip() == f"```{lang}":
            current, start = [], no + 1
        elif current is not None and line.strip() == "```":
            out.append((start, "\n".join(current) + "\n"))
            current = None
        elif current is not None:
            current.append(line)
    return out


def expectation(line: str):
    """The EXPECTED of a ``# prints EXPECTED; remark`` comment, or None."""
    m = re.search(r"#\s*prints\s+(.*)$", line)
    if not m:
        return None
    return m.group(1).split(";")[0].strip()


def _value(text: str) -> float:
    return float(text.replace(",", ""))


def check_printed(expected: str, printed: str, where: str) -> None:
    """``printed`` matches ``expected`` word for word, numbers with ``~`` within tolerance."""
    parts = re.split(rf"(~?{NUMBER})", expected)
    pattern = ""
    wanted = []
    for k, part in enumerate(parts):
        if k % 2:
            pattern += f"({NUMBER})"
            wanted.append(part)
        else:
            pattern += r"\s*".join(re.escape(w) for w in part.split()) if part.strip() else ""
            pattern += r"\s*"
    m = re.search(pattern, printed)
    assert m, f"{where}: printed {printed!r}, the README says {expected!r}"
    for got, want in zip(m.groups(), wanted):
        if want.startswith("~"):
            target = _value(want[1:])
            tol = max(0.01, 0.01 * abs(target))
            assert abs(_value(got) - target) <= tol, (
                f"{where}: printed {got}, the README says about {want[1:]} (tolerance {tol:g})"
            )
        else:
            assert _value(got) == _value(want), f"{where}: printed {got}, the README says {want}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    if not (SHARED / "data").is_dir():
        pytest.skip("../shared/data is not beside the repository")
    base = tmp_path_factory.mktemp("readme")
    (base / "shared").symlink_to(SHARED)
    (base / "work").mkdir()
    return base / "work"


def _env() -> dict:
    return {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}


PY_BLOCKS = [("README.md", start, code) for start, code in fenced_blocks("python")] + site_blocks()


@pytest.mark.parametrize(
    "page, start, code", PY_BLOCKS, ids=[f"{p}:{s}" for p, s, _ in PY_BLOCKS]
)
def test_python_block(workdir, page, start, code):
    if "import dask" in code:
        pytest.importorskip("dask.distributed")
    if "plotting" in code:
        pytest.importorskip("matplotlib")
    script = workdir / f"{page.replace('.', '_')}_{start}.py"
    script.write_text(code)
    run = subprocess.run(
        [sys.executable, script.name], cwd=workdir, capture_output=True, text=True,
        env=_env(), timeout=600,
    )
    assert run.returncode == 0, f"{page} block at line {start} failed:\n{run.stderr[-3000:]}"
    printed = run.stdout.splitlines()
    # One output line per print call, in order (the README's blocks print one line per call).
    calls = [line for line in code.splitlines() if re.match(r"\s*print\(", line)]
    assert len(printed) == len(calls), (calls, printed)
    for line, out in zip(calls, printed):
        expected = expectation(line)
        if expected is not None:
            check_printed(expected, out, f"{page} line {start + code.splitlines().index(line)}")


def test_every_printing_line_states_its_figure():
    for page, start, code in PY_BLOCKS:
        for k, line in enumerate(code.splitlines()):
            if re.match(r"\s*print\(", line):
                assert expectation(line), f"{page} line {start + k}: say what it prints"


def test_bash_blocks(workdir):
    blocks = fenced_blocks("bash")
    assert "pip install . && budgetsvm demo" in blocks[0][1]
    commands = [("budgetsvm demo", None, blocks[0][0])]
    # Blocks that install (the test command, the docs build, the wheel's build) are what CI
    # runs itself.
    for start, code in blocks[1:]:
        if "pip install" in code:
            assert any(c in code for c in ("sphinx-build -W", "pytest", "python -m build")), code
            continue
        for k, line in enumerate(code.splitlines()):
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append((line, expectation(line), start + k))
    shell_vars = ""
    for line, expected, no in commands:
        if re.match(r"^[A-Z0-9_]+=\S+", line):  # a variable for the lines after it
            shell_vars += line.split("#")[0].strip() + "; "
            continue
        run = subprocess.run(
            ["bash", "-c", shell_vars + line], cwd=workdir, capture_output=True, text=True,
            env=_env(), timeout=600,
        )
        assert run.returncode == 0, f"README line {no}: {line}\n{run.stderr[-2000:]}"
        if expected is not None:
            check_printed(expected, run.stdout.splitlines()[0], f"README line {no}")
