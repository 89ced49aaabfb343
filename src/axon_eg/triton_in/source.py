"""An existing Triton program, read: its ``@triton.jit`` kernels, the launches of them, the wrapper module.

Two forms come in (issue 22):

- **KernelBench**: ``class Model`` (the reference, PyTorch), ``class ModelNew`` (the same ``__init__``
  arguments, its ``forward`` launching the kernels), ``get_inputs()`` and ``get_init_inputs()``.
- **Triton-to-Triton**: ``class Model`` whose ``forward`` launches the kernels, with a YAML spec (input
  shapes and dtypes, ``__init__`` arguments) and a reference given apart (a KernelBench-format file whose
  ``Model`` is the PyTorch reference).

The file is parsed with libcst (a concrete syntax tree: every byte of the source kept, so a stage that
changes one launch argument changes nothing else). :func:`load` finds the kernels (functions decorated
``triton.jit`` / ``triton.autotune`` or the bare names imported from triton), their ``tl.constexpr``
parameters, and every launch ``kernel[grid](...)`` with its keyword arguments; errors name the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from axon_eg.errors import AxonError


class TritonInputError(AxonError, ValueError):
    """A Triton input file axon_eg cannot take: the message names the file and line."""


@dataclass(frozen=True)
class Kernel:
    name: str
    line: int
    params: tuple[str, ...]
    constexprs: tuple[str, ...]  # parameters annotated tl.constexpr
    autotuned: bool  # already under @triton.autotune (its configs pick the knobs)


@dataclass(frozen=True)
class Launch:
    kernel: str
    line: int
    keywords: dict[str, Any]  # keyword arguments with literal int values (None: not a literal)


@dataclass
class TritonFile:
    path: Path
    text: str
    module: cst.Module
    kernels: dict[str, Kernel]
    launches: list[Launch]
    wrapper: str  # the class whose forward launches the kernels: ModelNew, or Model (the other form)
    classes: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)
    trace: list[Any] | None = None  # the launches at the harness's sizes (launches.trace), when known

    def where(self, line: int) -> str:
        return f"{self.path}:{line}"


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    if isinstance(node, cst.Call):
        return _dotted(node.func)
    return ""


def _is_jit(decorator: cst.Decorator) -> tuple[bool, bool]:
    """(a triton.jit kernel, under triton.autotune)."""
    name = _dotted(decorator.decorator)
    return name in ("triton.jit", "jit"), name in ("triton.autotune", "autotune")


def _literal(node: cst.BaseExpression) -> Any:
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


class _Collector(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.kernels: dict[str, Kernel] = {}
        self.launches: list[Launch] = []
        self.classes: set[str] = set()
        self.functions: set[str] = set()
        self.depth = 0

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.depth == 0:
            self.classes.add(node.name.value)
        self.depth += 1

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self.depth -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        jit = autotuned = False
        for d in node.decorators:
            j, a = _is_jit(d)
            jit, autotuned = jit or j, autotuned or a
        if self.depth == 0:
            self.functions.add(node.name.value)
        if jit:
            params = tuple(p.name.value for p in node.params.params)
            constexprs = tuple(p.name.value for p in node.params.params
                               if p.annotation is not None and _dotted(p.annotation.annotation).endswith("constexpr"))
            line = self.get_metadata(PositionProvider, node).start.line
            self.kernels[node.name.value] = Kernel(node.name.value, line, params, constexprs, autotuned)
        self.depth += 1

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth -= 1

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Subscript) and isinstance(node.func.value, cst.Name):
            line = self.get_metadata(PositionProvider, node).start.line
            keywords = {a.keyword.value: _literal(a.value) for a in node.args if a.keyword is not None}
            self.launches.append(Launch(node.func.value.value, line, keywords))


def load(path: str | Path, text: str | None = None) -> TritonFile:
    """The file's kernels, launches and wrapper class; TritonInputError naming the file (and line) when it
    has no kernel, no launch of one, or no wrapper class."""
    path = Path(path)
    if text is None:
        if not path.is_file():
            raise TritonInputError(f"{path}: no such file")
        text = path.read_text()
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise TritonInputError(f"{path}:{exc.raw_line}: syntax error: {exc.message}") from None
    collector = _Collector()
    MetadataWrapper(module, unsafe_skip_copy=True).visit(collector)
    if not collector.kernels:
        raise TritonInputError(f"{path}: no @triton.jit kernel (the input is an existing Triton program)")
    launches = [launch for launch in collector.launches if launch.kernel in collector.kernels]
    if not launches:
        first = next(iter(collector.kernels.values()))
        raise TritonInputError(f"{path}:{first.line}: kernel {first.name} is never launched (kernel[grid](...))")
    wrapper = "ModelNew" if "ModelNew" in collector.classes else "Model" if "Model" in collector.classes else None
    if wrapper is None:
        raise TritonInputError(f"{path}: no class ModelNew (KernelBench form) or Model (whose forward launches the "
                               "kernels) to call them through")
    return TritonFile(path, text, module, collector.kernels, launches, wrapper, collector.classes,
                      collector.functions)


__all__ = ["Kernel", "Launch", "TritonFile", "TritonInputError", "load"]
