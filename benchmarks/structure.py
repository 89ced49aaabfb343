"""The package's structure in numbers (issue 50): import circles, private names imported across files,
function-level imports, re-export shims, op names compared as strings outside ``ir/``, literal op lists,
and the hardware name typed in code. Read from the source with ``ast``; nothing is imported but the
registry (for the op names).

    python benchmarks/structure.py            # the table
    python benchmarks/structure.py --detail   # and every finding, file:line
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "axon_eg"


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = ["axon_eg", *p.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


class _Imports(ast.NodeVisitor):
    """Every import of a module: (line, target module, names, inside a function)."""

    def __init__(self, mod: str, is_pkg: bool, known: set[str]) -> None:
        self.mod, self.is_pkg, self.known = mod, is_pkg, known
        self.depth = 0
        self.found: list[tuple[int, str, list[str], bool]] = []

    def _fn(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _fn

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.found.append((node.lineno, a.name, [], self.depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        target = _resolve(self.mod, self.is_pkg, node)
        names = [a.name for a in node.names]
        self.found.append((node.lineno, target, names, self.depth > 0))


def _edges(mods: dict[str, Path]) -> tuple[dict[str, set[str]], dict[str, list]]:
    known = set(mods)
    graph: dict[str, set[str]] = defaultdict(set)
    found = {}
    for mod, path in mods.items():
        v = _Imports(mod, path.name == "__init__.py", known)
        v.visit(ast.parse(path.read_text()))
        found[mod] = v.found
        for _, target, names, _ in v.found:
            if not target.startswith("axon_eg"):
                continue
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
            for t in subs or [target]:
                # a module's package __init__ is imported with it; only the named module counts as the edge
                while t not in known and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t != mod and t in known:
                    graph[mod].add(t)
    return graph, found


def _sccs(graph: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def _op_names() -> set[str]:
    sys.path.insert(0, str(ROOT / "src"))
    import axon_eg.ir  # noqa: F401 - registers every op, the library ops too
    from axon_eg.ir.ops import REGISTRY

    return set(REGISTRY)


def _strings(node: ast.AST) -> list[str] | None:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        vals = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return vals if len(vals) == len(node.elts) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return None


def measure(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Each metric's findings (``file:line what``); the count of a metric is the length of its list."""
    mods = _modules(root)
    graph, found = _edges(mods)
    ops = _op_names()
    rel = {m: str(p.relative_to(root.parent)) for m, p in mods.items()}
    res: dict[str, list[str]] = {k: [] for k in (
        "import circles", "files in the largest circle", "private names imported across files",
        "function-level imports of axon_eg", "re-export shims", "op names compared as strings outside ir/",
        "literal op lists outside ir/", "files typing \"h200\"")}
    circles = _sccs(graph, sorted(mods))
    res["import circles"] = [" <-> ".join(c) for c in circles]
    res["files in the largest circle"] = circles[0] if circles else []
    for mod, items in found.items():
        for line, target, names, inner in items:
            if not target.startswith("axon_eg"):
                continue
            if inner:
                res["function-level imports of axon_eg"].append(f"{rel[mod]}:{line} {target}")
            priv = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if priv and target != mod:
                res["private names imported across files"] += [f"{rel[mod]}:{line} {target}.{n}" for n in priv]
        src = mods[mod].read_text()
        if "re-export" in src:
            res["re-export shims"].append(rel[mod])
        if "h200" in src and not rel[mod].endswith("hw_schema.py"):
            res["files typing \"h200\""].append(rel[mod])
        if rel[mod].startswith("src/axon_eg/ir/") or rel[mod].startswith("axon_eg/ir/"):
            continue
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Compare):
                for op, right in zip(node.ops, node.comparators):
                    vals = _strings(right) if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) else None
                    left = _strings(node.left) if isinstance(op, (ast.Eq, ast.NotEq)) else None
                    hit = [v for v in (vals or []) + (left or []) if v in ops]
                    if hit:
                        res["op names compared as strings outside ir/"].append(f"{rel[mod]}:{node.lineno} {hit}")
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                vals = _strings(node)
                if vals and len(vals) >= 2 and all(v in ops for v in vals):
                    res["literal op lists outside ir/"].append(f"{rel[mod]}:{node.lineno} {vals}")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--detail", action="store_true")
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    res = measure()
    lines = sum(len(p.read_text().splitlines()) for p in _modules().values())
    table = Table(title=f"structure of src/axon_eg ({lines} lines)")
    table.add_column("metric")
    table.add_column("count", justify="right")
    for k, v in res.items():
        table.add_row(k, str(len(v)))
    Console().print(table)
    if args.detail:
        for k, v in res.items():
            print(f"\n## {k}")
            for x in v:
                print(" ", x)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
