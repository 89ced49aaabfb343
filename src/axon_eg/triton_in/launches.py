"""Launches of an existing Triton program: where their grids are, what a stage may change in them, and what
they launch at the harness's sizes.

- :func:`sites`: every ``kernel[grid](...)`` call in source order, with its grid expression resolved (a grid
  named by a variable is the value of that variable's assignment in the same function) and its keyword
  arguments.
- :func:`launch_changes_allowed`: the part of the fixed-harness rule about launches. A stage may change a
  launch's keyword arguments to literals, and its grid in two ways only:
  - **the grid follows the tile sizes**: the grid is the input's except for integer literals, and each
    changed literal was the old value of a keyword argument of that launch that now has the new value
    (``triton.cdiv(m, 64)`` becomes ``triton.cdiv(m, 128)`` with ``BLOCK_M=64`` -> ``BLOCK_M=128``);
  - **a persistent launch**: the grid is a tuple of integer literals (the programs that loop over the
    tiles), and the input's grid is passed to the kernel as ``AXON_GRID_<i>=`` keyword arguments (each the
    input's grid element, or ``grid[i]`` of the input's grid variable, following the tile sizes as above).
  Anything else (a keyword argument computing something, a grid that shrinks the work) is refused before
  it runs; what the rule lets through the correctness check judges.
- :func:`trace`: the launches the wrapper makes on the harness's inputs, run on the meta device (shapes
  only, no tensor memory): each launch's grid and its integer arguments by kernel parameter name, which the
  tiling stages read for the problem sizes. None when the wrapper cannot run on the meta device.
- :class:`SetLaunchKeywords`: the libcst transformer every stage that sets launch arguments uses.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from .source import TritonFile

GRID_KEYWORD = "AXON_GRID_{}"
"""The keyword argument by which a persistent launch passes the input's grid element ``i`` to its kernel."""
_GRID_KEYWORD = re.compile(r"AXON_GRID_(\d+)$")
_CODE = cst.Module([])


def code(node: cst.CSTNode) -> str:
    return _CODE.code_for_node(node)


@dataclass
class Site:
    """One launch ``kernel[grid](...)``."""

    kernel: str
    call: cst.Call
    slice: cst.BaseExpression  # the expression between the brackets
    grid: cst.BaseExpression  # the grid itself: the slice, or the value its variable was assigned
    grid_name: str | None  # the variable the slice names, if any
    keywords: dict[str, cst.BaseExpression] = field(default_factory=dict)

    def elements(self) -> list[cst.BaseExpression] | None:
        """The grid's elements when it is a tuple (a lambda or a call: None)."""
        if isinstance(self.grid, cst.Tuple):
            return [e.value for e in self.grid.elements]
        return None


class _Sites(cst.CSTVisitor):
    def __init__(self, kernels: set[str]):
        self.kernels = kernels
        self.sites: list[Site] = []
        self.assigned: list[dict[str, cst.BaseExpression]] = [{}]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.assigned.append({})

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.assigned.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self.assigned[-1][node.targets[0].target.value] = node.value

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) and func.value.value in self.kernels
                and len(func.slice) == 1 and isinstance(func.slice[0].slice, cst.Index)):
            return
        expr = func.slice[0].slice.value
        name = expr.value if isinstance(expr, cst.Name) else None
        grid = self.assigned[-1].get(name, expr) if name else expr
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        self.sites.append(Site(func.value.value, node, expr, grid, name, keywords))


def sites(tf: TritonFile) -> list[Site]:
    """Every launch of one of ``tf``'s kernels, in source order."""
    v = _Sites(set(tf.kernels))
    tf.module.visit(v)
    return v.sites


def grid_variables(tf: TritonFile) -> set[str]:
    """Names that launches use as their grid (their assignments belong to the grid, not the wrapper)."""
    return {s.grid_name for s in sites(tf) if s.grid_name}


def _literals(node: cst.CSTNode) -> tuple[str, list[int]]:
    """``node``'s code with every integer literal written 0, and those literals in order."""
    found: list[int] = []

    class Mask(cst.CSTTransformer):
        def leave_Integer(self, original: cst.Integer, updated: cst.Integer) -> cst.Integer:
            found.append(int(original.value, 0))
            return updated.with_changes(value="0")

    masked = node.visit(Mask())
    return code(masked), found


def follows(original: cst.CSTNode, candidate: cst.CSTNode, changed: dict[int, set[int]]) -> bool:
    """Whether ``candidate`` is ``original`` with only integer literals changed, each from an old value to a
    new one that ``changed`` pairs (the launch's tile-size keyword changes)."""
    a, la = _literals(original)
    b, lb = _literals(candidate)
    return a == b and len(la) == len(lb) and all(x == y or y in changed.get(x, ()) for x, y in zip(la, lb))


def _int(node: cst.BaseExpression | None) -> int | None:
    return int(node.value, 0) if isinstance(node, cst.Integer) else None


def _is_literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node = node.expression
    return isinstance(node, cst.Integer | cst.Float | cst.SimpleString) or (
        isinstance(node, cst.Name) and node.value in ("True", "False", "None"))


def launch_changes_allowed(original: TritonFile, candidate: TritonFile) -> str | None:
    """None when every launch of ``candidate`` changes the input's only as the module docstring allows;
    else why (naming the launch's kernel and the argument)."""
    a, b = sites(original), sites(candidate)
    if [s.kernel for s in a] != [s.kernel for s in b]:
        return f"launches {[s.kernel for s in a]} became {[s.kernel for s in b]}"
    for old, new in zip(a, b):
        changed: dict[int, set[int]] = {}
        for k, v in new.keywords.items():
            o = old.keywords.get(k)
            if o is not None and _int(o) is not None and _int(v) is not None and _int(o) != _int(v):
                changed.setdefault(_int(o), set()).add(_int(v))
        elements = old.elements()
        for k, v in new.keywords.items():
            if k in old.keywords and code(old.keywords[k]) == code(v):
                continue
            if _is_literal(v):
                continue
            m = _GRID_KEYWORD.match(k)
            if m and elements is not None and int(m.group(1)) < len(elements):
                i = int(m.group(1))
                if follows(elements[i], v, changed) or (old.grid_name and code(v) == f"{old.grid_name}[{i}]"):
                    continue
            return f"launch of {new.kernel}: keyword argument {k}={code(v)} is neither the input's nor a literal"
        if follows(old.grid, new.grid, changed):
            continue
        persistent = isinstance(new.slice, cst.Tuple) and new.slice.elements and all(
            isinstance(e.value, cst.Integer) for e in new.slice.elements)
        if persistent and elements is not None and all(GRID_KEYWORD.format(i) in new.keywords for i in range(len(elements))):
            continue
        return (f"launch of {new.kernel}: grid {code(old.grid)} became {code(new.grid)} (a grid may only follow the "
                "launch's tile sizes, or be a persistent launch's)")
    return None


class SetLaunchKeywords(cst.CSTTransformer):
    """Every launch of ``kernel`` with ``values`` as its keyword arguments (replaced or appended; a value
    that is a string of code, ``Code("...")``, is written as that expression), its grid replaced by
    ``grid`` (code) when given, and each integer literal of its grid (or of its grid variable's assignment)
    in ``literals`` replaced by the value it maps to, element by element (``{axis: (old, new)}``)."""

    def __init__(self, kernel: str, values: dict[str, Any], grid: str | None = None,
                 literals: dict[int, tuple[int, int]] | None = None, grid_variables: set[str] = frozenset()):
        self.kernel, self.values, self.grid = kernel, values, grid
        self.literals = literals or {}
        self.grid_variables = grid_variables
        self.launch_grids: set[str] = set()

    @staticmethod
    def literal(value: Any) -> cst.BaseExpression:
        if isinstance(value, Code):
            return cst.parse_expression(value.text)
        return cst.SimpleString(repr(value)) if isinstance(value, str) else cst.Integer(str(value))

    def _retile(self, grid: cst.BaseExpression) -> cst.BaseExpression:
        if not self.literals or not isinstance(grid, cst.Tuple):
            return grid
        elements = list(grid.elements)
        for axis, (old, new) in self.literals.items():
            if axis < len(elements):
                elements[axis] = elements[axis].with_changes(value=_replace_int(elements[axis].value, old, new))
        return grid.with_changes(elements=elements)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if (len(updated.targets) == 1 and isinstance(updated.targets[0].target, cst.Name)
                and updated.targets[0].target.value in self.grid_variables):
            return updated.with_changes(value=self._retile(updated.value))
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        if not (isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) and func.value.value == self.kernel):
            return updated
        index = func.slice[0].slice
        if self.grid is not None:
            func = func.with_changes(slice=[func.slice[0].with_changes(slice=index.with_changes(
                value=cst.parse_expression(self.grid)))])
        elif isinstance(index, cst.Index) and not isinstance(index.value, cst.Name):
            func = func.with_changes(slice=[func.slice[0].with_changes(slice=index.with_changes(
                value=self._retile(index.value)))])
        args = list(updated.args)
        done = set()
        for i, a in enumerate(args):
            if a.keyword is not None and a.keyword.value in self.values:
                args[i] = a.with_changes(value=self.literal(self.values[a.keyword.value]))
                done.add(a.keyword.value)
        for key, value in self.values.items():
            if key in done:
                continue
            if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(cst.Arg(value=self.literal(value), keyword=cst.Name(key),
                                equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                      whitespace_after=cst.SimpleWhitespace(""))))
        return updated.with_changes(func=func, args=args)


@dataclass(frozen=True)
class Code:
    """A keyword argument's value written as code (``SetLaunchKeywords``), not as a literal."""

    text: str


def _replace_int(node: cst.BaseExpression, old: int, new: int) -> cst.BaseExpression:
    """``node`` with its integer literals equal to ``old`` written ``new``."""

    class Swap(cst.CSTTransformer):
        def leave_Integer(self, original: cst.Integer, updated: cst.Integer) -> cst.Integer:
            return updated.with_changes(value=str(new)) if int(original.value, 0) == old else updated

    return node.visit(Swap())


@dataclass(frozen=True)
class Traced:
    """One launch the wrapper made: its grid (programs per axis) and its arguments by kernel parameter name
    (integers as they are; a tensor as its item size in bytes, under ``tensor_items``)."""

    kernel: str
    grid: tuple[int, ...]
    ints: dict[str, int]
    tensor_items: dict[str, int]

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


def trace(tf: TritonFile, inputs: list[dict[str, Any]], init: list[Any],
          constants: dict[str, int] | None = None) -> list[Traced] | None:
    """The launches ``tf``'s wrapper makes on ``inputs`` (``[{"shape": [...], "dtype": "fp32"}, ...]``),
    built from ``init`` and run on the meta device with every kernel replaced by a recorder, with the module
    ``constants`` of the run's sizes set; None when the wrapper cannot run that way (it reads values, say)."""
    import importlib.util
    import sys
    import tempfile
    from pathlib import Path

    import torch

    from axon_eg.measure.harness import TORCH_DTYPES  # lazy: loads torch; the stages (and triton_in.run) import this module

    records: list[Traced] = []

    class Recorder:
        def __init__(self, name: str):
            self.name = name

        def __getitem__(self, grid: Any):
            def launch(*args: Any, **kwargs: Any) -> None:
                params = tf.kernels[self.name].params
                bound = dict(zip(params, args)) | kwargs
                g = grid(bound) if callable(grid) else grid
                g = tuple(int(x) for x in (g if isinstance(g, tuple | list) else (g,)))
                ints = {k: int(v) for k, v in bound.items() if isinstance(v, int) and not isinstance(v, bool)}
                items = {k: v.element_size() for k, v in bound.items() if isinstance(v, torch.Tensor)}
                records.append(Traced(self.name, g, ints, items))

            return launch

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"axon_eg_trace_{tf.path.stem}.py"
        path.write_text(tf.text)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        try:
            sys.modules[path.stem] = mod
            spec.loader.exec_module(mod)
            for name in tf.kernels:
                setattr(mod, name, Recorder(name))
            for name, value in (constants or {}).items():
                setattr(mod, name, value)
            with torch.device("meta"):
                model = getattr(mod, tf.wrapper)(*init)
                tensors = [torch.empty(s["shape"], dtype=TORCH_DTYPES[s["dtype"]]) for s in inputs]
                with torch.no_grad():
                    model(*tensors)
        except Exception:  # noqa: BLE001 - a wrapper that needs values: no trace, the stages go without sizes
            return None
        finally:
            sys.modules.pop(path.stem, None)
    return records


__all__ = ["GRID_KEYWORD", "Code", "SetLaunchKeywords", "Site", "Traced", "code", "follows", "grid_variables",
           "launch_changes_allowed", "sites", "trace"]
