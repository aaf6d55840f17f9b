"""Fails when two source files import each other, directly or through others.

The Rust graph: a file's edges are the `crate::` and `super::` paths it names (in `use` lines,
brace groups and inline paths, test modules included), each resolved to the file that defines
the longest prefix of the path. The Python graph: every `import` of the package's own modules,
inside functions too (the compiled extension, known by its stub, is a module without imports). A strongly connected component of more than one file is a loop. The Rust core's folders are
also layered (`LAYERS`): a file may use its own folder and the folders of lower layers only.

Run from the repository root: `python .ci/import_loops.py` (CI runs it; exit 1 on a loop).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rust_modules(src: Path) -> dict[tuple[str, ...], Path]:
    """Module path (without `crate`) -> the file that defines it."""
    modules = {}
    for path in src.rglob("*.rs"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        modules[tuple(parts)] = path
    return modules


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _expand_groups(path: str) -> list[str]:
    """`a::{b::c, d}` -> [`a::b::c`, `a::d`] (nested groups too)."""
    start = path.find("{")
    if start < 0:
        return [path]
    depth, end = 0, start
    for end in range(start, len(path)):
        depth += {"{": 1, "}": -1}.get(path[end], 0)
        if depth == 0:
            break
    inner, items, depth, last = path[start + 1 : end], [], 0, 0
    for i, ch in enumerate(inner + ","):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(inner[last:i].strip())
            last = i + 1
    prefix = path[:start]
    return [expanded for item in items if item for expanded in _expand_groups(prefix + item)]


PATH_RE = re.compile(r"\b(crate|super)((?:\s*::\s*(?:[A-Za-z_][A-Za-z0-9_]*|\{[^;]*?\}|\*))+)")
INLINE_MOD_RE = re.compile(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")


def rust_edges(src: Path) -> dict[Path, set[Path]]:
    modules = rust_modules(src)
    by_file = {path: parts for parts, path in modules.items()}
    edges: dict[Path, set[Path]] = {path: set() for path in by_file}
    for path, own in by_file.items():
        text = _strip_comments(path.read_text())
        # Inline modules (`mod tests { ... }`) shift what `super` means: track them by braces.
        inline: list[tuple[int, str]] = []
        depth = 0
        pos = 0
        events = []
        for m in INLINE_MOD_RE.finditer(text):
            events.append((m.end() - 1, "mod", m.group(1)))
        for m in PATH_RE.finditer(text):
            events.append((m.start(), "path", m))
        events.sort(key=lambda e: e[0])
        for at, kind, payload in events:
            for ch in text[pos:at]:
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    while inline and inline[-1][0] > depth:
                        inline.pop()
            pos = at
            if kind == "mod":
                # The brace at `at` opens the module: it is counted when the scan passes it.
                inline.append((depth + 1, payload))
                continue
            m = payload
            raw = re.sub(r"\s+", "", m.group(2)).lstrip(":")
            current = list(own) + [name for _, name in inline]
            for full in _expand_groups(raw):
                segs = [s for s in full.split("::") if s]
                if m.group(1) == "crate":
                    target = segs
                else:
                    base = current[:-1]
                    while segs and segs[0] == "super":
                        base, segs = base[:-1], segs[1:]
                    target = base + segs
                for k in range(len(target), -1, -1):
                    hit = modules.get(tuple(target[:k]))
                    if hit is not None:
                        if hit != path:
                            edges[path].add(hit)
                        break
    return edges


def python_edges(package: Path) -> dict[Path, set[Path]]:
    name = package.name
    files = {
        tuple([name] + list(p.relative_to(package).with_suffix("").parts)): p
        for p in sorted(package.rglob("*.py")) + sorted(package.rglob("*.pyi"))
        if p.suffix == ".py" or not p.with_suffix(".py").exists()
    }
    modules = {}
    for parts, path in files.items():
        modules[parts[:-1] if parts[-1] == "__init__" else parts] = path
    edges: dict[Path, set[Path]] = {path: set() for path in files.values()}
    for parts, path in files.items():
        is_init = parts[-1] == "__init__"
        own_pkg = list(parts[:-1])
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name.split(".") for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = own_pkg[: len(own_pkg) - (node.level - 1)]
                else:
                    base = []
                mod = base + (node.module.split(".") if node.module else [])
                targets = [mod + [alias.name] for alias in node.names]
            for target in targets:
                for k in range(len(target), 0, -1):
                    hit = modules.get(tuple(target[:k]))
                    if hit is not None:
                        if hit != path and not (is_init and hit == path):
                            edges[path].add(hit)
                        break
    return edges


# The core's folders, lowest first; folders of one layer do not use each other.
LAYERS = [["common"], ["simd"], ["data"], ["kernels"], ["budget", "exact"], ["budgeted"]]


def layer_breaches(edges: dict[Path, set[Path]], core: Path) -> list[str]:
    rank = {name: k for k, names in enumerate(LAYERS) for name in names}

    def folder(path: Path) -> str | None:
        parts = path.relative_to(core).parts
        return parts[0] if len(parts) > 1 else None

    breaches = []
    for path, targets in sorted(edges.items()):
        if core not in path.parents:
            continue
        own = folder(path)
        for target in sorted(targets):
            other = folder(target) if core in target.parents else None
            if own is None or other is None or other == own:
                continue
            if rank.get(other, -1) >= rank.get(own, -1):
                breaches.append(
                    f"{path.relative_to(ROOT)} uses {target.relative_to(ROOT)} ({own} may not use {other})"
                )
    return breaches


def loops(edges: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components with more than one file (Tarjan, iterative)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    on_stack: set[Path] = set()
    stack: list[Path] = []
    found = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main() -> int:
    failed = False
    for label, edges in (
        ("Rust", rust_edges(ROOT / "src")),
        ("Python", python_edges(ROOT / "python" / "budgetsvm")),
    ):
        components = loops(edges)
        n_edges = sum(len(v) for v in edges.values())
        for component in components:
            failed = True
            members = set(component)
            print(f"{label} import loop among {len(component)} files:")
            for path in component:
                inside = sorted(str(t.relative_to(ROOT)) for t in edges[path] & members)
                print(f"  {path.relative_to(ROOT)} -> {', '.join(inside)}")
        breaches = layer_breaches(edges, ROOT / "src" / "core") if label == "Rust" else []
        for breach in breaches:
            failed = True
            print(f"Rust layering: {breach}")
        if not components and not breaches:
            print(f"{label}: {len(edges)} files, {n_edges} imports, no loops")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
