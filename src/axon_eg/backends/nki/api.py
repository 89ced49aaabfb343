"""The documented NKI API, as one table (``data/api_surface.yaml``), and the checks that read it.

The table lists every public name of ``nki.language`` and ``nki.isa`` as the public NKI documentation gives
them, for the current ``nki`` dialect and the legacy ``neuronxcc.nki`` one: parameters in order, keyword-only
parameters, category, engine and documented limits, and where each was read. Names are written
``nki.language.X`` / ``nki.isa.X`` in both dialects; an entry with ``dialects: [nki, neuronxcc]`` is the same
in both, one with ``dialect:`` holds for that dialect alone.

- :func:`documented`: the table of one dialect (``"current"`` or ``"legacy"``), by qualified name.
- :func:`check_calls`: every use of ``nl.X`` / ``nisa.X`` in a kernel's source (import aliases resolved) held
  against the table: the name documented in the kernel's dialect, at most as many positional arguments as
  documented parameters, every keyword a documented parameter. What an emitted kernel calls must pass, so
  that the day a real toolchain sees it, it compiles.
- :func:`coverage`: per documented name, whether the simulator provides it (``supported``) or raises naming
  it (``unsupported``), as ``python -m axon_eg.backends.nki.api`` prints it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from axon_eg.hw import load

from .nki_modules import fake_modules
from .nki_values import CURRENT, LEGACY
from .session import Session

DIALECTS = {"current": "nki", "legacy": "neuronxcc"}
"""The simulator's dialect names -> the table's."""
MODULES = {"current": ("nki.language", "nki.isa"), "legacy": ("neuronxcc.nki.language", "neuronxcc.nki.isa")}


@dataclass(frozen=True)
class Api:
    name: str  # nki.language.X or nki.isa.X
    params: tuple[str, ...]
    keyword_only: tuple[str, ...]
    category: str
    entry: dict[str, Any]

    @property
    def short(self) -> str:
        return self.name.split(".", 1)[1]  # language.X / isa.X

    def accepts(self, positional: int, keywords: set[str]) -> str | None:
        """None when a call with ``positional`` arguments and ``keywords`` fits the documented signature."""
        if self.params or self.keyword_only:
            if positional > len(self.params):
                return f"{positional} positional arguments, the documentation has {len(self.params)} ({', '.join(self.params)})"
            unknown = sorted(keywords - set(self.params) - set(self.keyword_only))
            if unknown:
                return f"keyword {', '.join(unknown)} is not a documented parameter"
        return None


@cache
def _table() -> list[dict[str, Any]]:
    text = resources.files("axon_eg.backends.nki").joinpath("data", "api_surface.yaml").read_text()
    return yaml.safe_load(text)["apis"]


@cache
def documented(dialect: str) -> dict[str, Api]:
    """The documented API of ``dialect`` ("current" or "legacy"), by qualified name (``nki.isa.nc_matmul``)."""
    tag = DIALECTS[dialect]
    out: dict[str, Api] = {}
    for e in _table():
        if e.get("dialect", tag) != tag and tag not in e.get("dialects", ()):
            continue
        if "dialects" in e and tag not in e["dialects"]:
            continue
        out[e["name"]] = Api(e["name"], tuple(e.get("params") or ()), tuple(e.get("keyword_only") or ()),
                             e.get("category", "other"), e)
    return out


def _aliases(tree: ast.AST, dialect: str) -> dict[str, str]:
    """Local names of the NKI modules a kernel imports -> the table's module (``nki.language`` / ``nki.isa``)."""
    lang, isa = MODULES[dialect]
    table = {lang: "nki.language", isa: "nki.isa"}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in table and a.asname:
                    out[a.asname] = table[a.name]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in table:
                    out[a.asname or a.name] = table[full]
    return out


@dataclass(frozen=True)
class Use:
    line: int
    name: str  # qualified: nki.isa.nc_matmul
    positional: int | None  # None: referenced, not called
    keywords: frozenset[str]


def uses(source: str, dialect: str) -> Iterator[Use]:
    """Every reference to a name of the NKI modules in ``source`` (calls with their arguments)."""
    tree = ast.parse(source)
    aliases = _aliases(tree, dialect)
    called: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                and node.func.value.id in aliases:
            called.add(id(node.func))
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                positional = None  # *args / **kwargs: the count is not known statically
            else:
                positional = len(node.args)
            yield Use(node.lineno, f"{aliases[node.func.value.id]}.{node.func.attr}", positional,
                      frozenset(k.arg for k in node.keywords if k.arg))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and id(node) not in called:
            yield Use(node.lineno, f"{aliases[node.value.id]}.{node.attr}", None, frozenset())


def check_calls(source: str, dialect: str) -> list[str]:
    """What in ``source`` is not documented NKI of ``dialect``: one line per use (line, name, why)."""
    table = documented(dialect)
    problems = []
    for u in uses(source, dialect):
        api = table.get(u.name)
        if api is None:
            problems.append(f"line {u.line}: {u.name} is not documented in the {DIALECTS[dialect]} dialect")
            continue
        if u.positional is not None:
            why = api.accepts(u.positional, set(u.keywords))
            if why:
                problems.append(f"line {u.line}: {u.name}: {why}")
    return sorted(set(problems))


def coverage(dialect: str, target: str = "trn2") -> dict[str, str]:
    """Documented name -> "supported" (the simulator provides it) or "unsupported" (it raises naming it)."""
    session = Session(load(target), CURRENT if dialect == "current" else LEGACY, "<coverage>")
    modules = fake_modules(session)
    lang, isa = (modules[m] for m in MODULES[dialect])
    out = {}
    for name in documented(dialect):
        module = lang if name.startswith("nki.language.") else isa
        try:
            getattr(module, name.rsplit(".", 1)[1])
            out[name] = "supported"
        except (NotImplementedError, AttributeError):
            out[name] = "unsupported"
    return out


def table_markdown() -> str:
    """The coverage table of both dialects, one row per documented name."""
    cur, leg = coverage("current"), coverage("legacy")
    names = sorted(set(cur) | set(leg))
    lines = ["| API | category | nki (current) | neuronxcc (legacy) |", "|---|---|---|---|"]
    for n in names:
        api = documented("current").get(n) or documented("legacy").get(n)
        lines.append(f"| `{n}` | {api.category} | {cur.get(n, '-')} | {leg.get(n, '-')} |")
    for d, cov in (("nki (current)", cur), ("neuronxcc (legacy)", leg)):
        lines.append("")
        lines.append(f"{d}: {sum(v == 'supported' for v in cov.values())} supported of {len(cov)} documented")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table_markdown())
