"""Layers import downwards (ARCHITECTURE.md, invariant 7): every ``import`` of the package, at module level
or inside a function, read from the source with ``ast``.

- ``ir/`` imports nothing of axon_eg but ``errors``;
- ``semantics/`` and ``egraph/`` import only ``ir/`` and ``errors`` (and themselves);
- ``extract/`` reaches a backend only through ``backends/base.py``;
- egglog is imported only in ``egraph/``, z3 only in ``semantics/`` (and the proof modules built on it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from axon_eg import hw
from axon_eg.egraph.nugraph import DEFAULT_FLOPS_PER_BYTE

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "axon_eg"


def _imports(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, a module of the package at ``root``."""
    module = ["axon_eg", *path.relative_to(root).with_suffix("").parts]
    package = module[:-1]  # a module's package; an __init__'s "module" ends in "__init__"
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
    return out


def _violations(folder: str, allowed: tuple[str, ...], banned: tuple[str, ...] = (), root: Path = PACKAGE) -> list[str]:
    """``file:line imports name`` for each import of the package outside ``allowed`` (module prefixes) or of
    a ``banned`` third-party package, in the files under ``root / folder``."""
    bad = []
    for path in sorted((root / folder).rglob("*.py")):
        for line, name in _imports(path, root):
            ok = not name.startswith("axon_eg") or any(name == a or name.startswith(a + ".") for a in allowed)
            if not ok or name.split(".")[0] in banned:
                bad.append(f"{path.relative_to(root.parent)}:{line} imports {name}")
    return bad


LAYERS = {
    "ir": ("axon_eg.ir", "axon_eg.errors"),
    "semantics": ("axon_eg.semantics", "axon_eg.ir", "axon_eg.errors"),
    "egraph": ("axon_eg.egraph", "axon_eg.ir", "axon_eg.errors"),
}


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_lower_layers_import_only_downwards(folder: str) -> None:
    banned = ("z3",) if folder == "egraph" else ("egglog",)
    assert not _violations(folder, LAYERS[folder], banned)


def test_extract_reaches_backends_only_through_the_interface() -> None:
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line} imports {name}"
           for p in sorted((PACKAGE / "extract").rglob("*.py")) for line, name in _imports(p)
           if name.startswith("axon_eg.backends") and name != "axon_eg.backends.base"]
    assert not bad


def test_the_default_extraction_cost_is_the_h200s() -> None:
    assert hw.load("h200").flops_per_byte() == DEFAULT_FLOPS_PER_BYTE


def test_the_checker_sees_a_planted_upward_import(tmp_path: Path) -> None:
    """Relative imports are resolved, inside functions too: a planted one is reported with file and line."""
    root = tmp_path / "axon_eg"
    (root / "ir").mkdir(parents=True)
    (root / "ir" / "ok.py").write_text("from . import ops\nfrom ..errors import AxonError\n")
    (root / "ir" / "bad.py").write_text("import math\n\ndef f():\n    from ..backends import base\n")
    assert _violations("ir", LAYERS["ir"], root=root) == ["axon_eg/ir/bad.py:4 imports axon_eg.backends"]


# ------------------------------------------------------------------------------------------------
# One direction between folders (issue 50)
# ------------------------------------------------------------------------------------------------
BELOW_THE_PIPELINE = ("ir", "semantics", "egraph", "extract", "backends", "measure", "rules_discovered")
ABOVE = ("axon_eg.targets", "axon_eg.pipeline", "axon_eg.cli", "axon_eg.dynamo", "axon_eg.buckets",
         "axon_eg.triton_in")


@pytest.mark.parametrize("folder", BELOW_THE_PIPELINE)
def test_code_below_the_pipeline_is_handed_its_backend(folder: str) -> None:
    """The backend registry (``targets.py``), the pipeline and what calls it sit above: nothing below asks
    them (an enumerator is handed its ``Backend``; a backend owns its cost model)."""
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line} imports {name}"
           for p in sorted((PACKAGE / folder).rglob("*.py")) for line, name in _imports(p)
           if any(name == a or name.startswith(a + ".") for a in ABOVE)]
    assert not bad


def test_only_the_command_line_imports_the_cli_package() -> None:
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line} imports {name}"
           for p in sorted(PACKAGE.rglob("*.py")) if "cli" not in p.relative_to(PACKAGE).parts
           for line, name in _imports(p) if name == "axon_eg.cli" or name.startswith("axon_eg.cli.")]
    assert not bad


def _folder(module: str) -> str:
    parts = module.split(".")
    path = PACKAGE.joinpath(*parts[1:])
    return ".".join(parts[:-1]) if not path.is_dir() else module


def test_no_import_circle_spans_two_folders() -> None:
    """Imports between folders run one way: every import circle left (``benchmarks/structure.py``) lies
    inside one folder."""
    from benchmarks.structure import measure

    spanning = [c for c in measure()["import circles"] if len({_folder(m) for m in c.split(" <-> ")}) > 1]
    assert not spanning


def test_the_circle_check_sees_a_planted_circle(tmp_path: Path) -> None:
    from benchmarks.structure import measure

    root = tmp_path / "axon_eg"
    for folder in ("ir", "extract"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "ir" / "ops.py").write_text("")
    (root / "extract" / "cost.py").write_text("from axon_eg.ir import x\n")
    (root / "ir" / "x.py").write_text("def f():\n    from ..extract import cost\n")
    circles = measure(root)["import circles"]
    assert circles == ["axon_eg.extract.cost <-> axon_eg.ir.x"]


def _h200_literals(path: Path) -> list[int]:
    """Lines where ``path`` spells the default hardware's name as a value (docstrings aside)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value == hw.DEFAULT_HW and id(n) not in docs]


def test_the_default_hardware_is_named_once() -> None:
    """``hw.DEFAULT_HW`` is the one place the default hardware is named; every default reads it."""
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
           if p.name != "hw.py" for line in _h200_literals(p)]
    assert not bad


def test_every_target_has_a_backend() -> None:
    """The registry's loaders and the target names the pipeline accepts are the same set, each backend under
    its own name."""
    from axon_eg.backends.base import TARGETS
    from axon_eg.targets import backend_for, backends

    assert sorted(backends()) == sorted(TARGETS)
    assert all(backend_for(t).name == t for t in TARGETS)


def _lazy_imports_without_a_reason(root: Path = PACKAGE) -> list[str]:
    """``file:line`` of each import of the package inside a function with no ``lazy:`` comment on its line
    or the line above (what it would load, or which circle it would close, if it moved to the top)."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                relative = isinstance(inner, ast.ImportFrom) and inner.level > 0
                names = [a.name for a in inner.names] if isinstance(inner, ast.Import) else \
                    [inner.module or ""] if isinstance(inner, ast.ImportFrom) else []
                if not (relative or any(n.startswith("axon_eg") for n in names)):
                    continue
                around = lines[inner.lineno - 2: inner.end_lineno]
                if not any("lazy:" in ln for ln in around):
                    bad.append(f"{path.relative_to(root.parent)}:{inner.lineno}")
    return sorted(set(bad))


def test_every_import_inside_a_function_says_why() -> None:
    assert not _lazy_imports_without_a_reason()


def test_the_reason_check_sees_a_planted_import(tmp_path: Path) -> None:
    pkg = tmp_path / "axon_eg"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    from axon_eg import b\n    return b\n\n\ndef g():\n"
                              "    from axon_eg import c  # lazy: loads z3\n    return c\n")
    assert _lazy_imports_without_a_reason(pkg) == ["axon_eg/a.py:2"]
