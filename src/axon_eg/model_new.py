"""``OptimizedModule.save(path)``: one Python file in KernelBench's ``ModelNew`` form that imports torch and
triton (and what the model's own class imports), never axon_eg, and whose import runs nothing but definitions.

The file holds, in order:

1. **The model's class**, one of two ways:

   - *A class defined in the user's own file* (a script, a module of the user's project, a KernelBench file):
     its definition and only what it needs of that file, found with ``ast`` and ``symtable`` (never regexes):
     the class, its base classes defined there, the module-level functions, classes, constants and imports
     its code reads, transitively, and KernelBench's ``get_inputs`` / ``get_init_inputs`` with what they read
     when the file defines them. Never a statement that runs something: ``model = Model(...)`` unless the
     class reads ``model``, calls, loops, ``with`` blocks, ``if __name__ == "__main__":``, the ``ax.optimize``
     and ``save`` calls themselves. ``from __future__`` imports come first; a relative import is made
     absolute (the class's package); an import statement keeps only the names that are needed. A name the
     class needs that the file binds only in a statement that runs things, a needed import of axon_eg, and a
     class defined inside a function are refused (``InvalidArgument`` naming the name, file and line).
   - *A class from an installed library* (its file under site-packages or the standard library:
     ``torch.nn.Sequential``, a timm or transformers class): imported by its public path (``from torch.nn
     import Sequential``). When the module tree can be written as constructor calls -- torch containers
     (``Sequential``, ``ModuleList``, ``ModuleDict``) of modules whose constructor arguments are their own
     attributes (``Linear(16, 32, bias=True)``, ``LayerNorm((20,), eps=1e-05, ...)``), checked by rebuilding
     the tree on the meta device and comparing the module types, parameter and buffer shapes and dtypes and
     ``repr`` -- ``get_init_inputs()`` returns those arguments and ``get_inputs()`` random inputs of the
     built shapes, so ``ModelNew(*get_init_inputs())`` rebuilds the tree. Otherwise ``ModelNew`` takes the
     original's constructor arguments (a transformers config, ...), or use ``ModelNew.from_module``.

2. Each region's kernel file, as a string run as its own module (registered with ``linecache``, where
   ``triton.jit`` reads a function's source), called through an opaque custom op of its own
   (``torch.ops.axon_eg_saved.<region>_<digest>``, with a fake giving its outputs' shapes and dtypes); the
   Triton interpreter's bf16 work-arounds (``backends.triton.interpreter``), copied in and applied only under
   ``TRITON_INTERPRET=1``, so the file computes on a CPU what it computes on a GPU.
3. The graph of the first version built, as aten calls, free of the device it was exported on (tensors it
   creates go to the device of the call's inputs).
4. ``class ModelNew(<the class>)``: the class's own ``__init__``, so ``ModelNew(*init args)`` has the same
   parameters as the original built from the same seed in the same order (else ``load_state_dict(
   model.state_dict())``); ``ModelNew.from_module(model)`` wraps an already built model (its submodules,
   parameters and buffers shared, not copied); ``forward`` runs the graph through the kernels, which take
   the inputs of that version's shapes only (they refuse others, naming the argument). With the backend's
   ``rest="inductor"`` (its default) the graph runs through ``torch.compile`` (compiled at the first call):
   Inductor's code for everything around the regions, which it calls as the opaque ops they are, as the
   hybrid backend does in process; with ``rest="eager"``, as torch code. Called with meta
   tensors it returns meta tensors of the right shapes and dtypes and runs no kernel, as eager torch does.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import os
import site
import symtable
import sys
import sysconfig
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from axon_eg import __version__
from axon_eg.backends.triton import interpreter
from axon_eg.errors import InvalidArgument
from axon_eg.regions import RegionKernel, drop_asserts

RESERVED = frozenset({"ModelNew", "torch", "triton", "get_inputs", "get_init_inputs"})
"""Names the saved file defines or imports itself: an imported library class of one of these names is aliased."""


# ------------------------------------------------------------------------------------------------
# The model's class
# ------------------------------------------------------------------------------------------------
@dataclass
class ClassSource:
    """What the saved file needs to define the model's class: ``future`` (``from __future__`` lines, first in
    the file), ``code`` (the definitions or the import), ``base`` (the name ``ModelNew`` subclasses) and
    ``origin`` (for the file's header)."""

    future: list[str]
    code: str
    base: str
    origin: str
    kept: list[str] = field(default_factory=list)  # the names the code defines (for messages and tests)


def class_source(module: torch.nn.Module, key: tuple = ()) -> ClassSource:
    """The model's class for the saved file: extracted from the user's file, or imported from the library it
    comes from (see the module docstring); ``key``: the signature the saved graph was built for."""
    cls = type(module)
    if _from_library(cls):
        return _imported(cls, module, key)
    try:
        path = Path(inspect.getsourcefile(cls) or "")
        text = path.read_text()
    except (OSError, TypeError) as exc:
        raise InvalidArgument(f"save: the source file of {cls.__name__} cannot be read ({exc}); ModelNew "
                              "subclasses it, so it must come from a file") from None
    return extract(text, str(path), cls.__name__, cls.__qualname__, cls.__module__)


def _library_dirs() -> tuple[str, ...]:
    paths = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        paths |= set(site.getsitepackages()) | {site.getusersitepackages()}
    except AttributeError:  # a virtualenv's old site module
        pass
    return tuple(os.path.abspath(p) + os.sep for p in paths if p)


def _from_library(cls: type) -> bool:
    """Whether ``cls`` comes from an installed library (not axon_eg): its file is under site-packages or the
    standard library, and it is importable by its module and name."""
    if cls.__module__.split(".")[0] in ("axon_eg", "__main__") or "<locals>" in cls.__qualname__:
        return False
    try:
        path = os.path.abspath(inspect.getsourcefile(cls) or "")
    except TypeError:  # a class without a source file (a C extension's): importable or nothing
        path = ""
    parts = set(Path(path).parts)
    if path and not (path.startswith(_library_dirs()) or parts & {"site-packages", "dist-packages"}):
        return False
    return _public_path(cls) is not None


def _public_path(cls: type) -> tuple[str, str] | None:
    """(module, name) from which ``cls`` imports, the shortest already-imported package that gives it
    (``torch.nn`` for ``Sequential``), else its own module; None when it is not importable that way."""
    if "." in cls.__qualname__:
        return None
    parts = cls.__module__.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        mod = sys.modules.get(name)
        try:
            if mod is not None and getattr(mod, cls.__name__, None) is cls:
                return name, cls.__name__
        except Exception:  # noqa: BLE001 - a lazy package that fails to give the name: try the next one
            continue
    try:
        mod = importlib.import_module(cls.__module__)
    except Exception:  # noqa: BLE001 - not importable: not a library class
        return None
    return (cls.__module__, cls.__name__) if getattr(mod, cls.__name__, None) is cls else None


class _Refs:
    """The expressions that name classes in the saved file, and the imports they need."""

    def __init__(self) -> None:
        self.imports: dict[str, str] = {}  # the name used -> its import line

    def of(self, cls: type) -> str:
        if getattr(torch.nn, cls.__name__, None) is cls:
            return f"torch.nn.{cls.__name__}"
        where = _public_path(cls)
        if where is None:
            raise LookupError(cls.__qualname__)
        module, name = where
        alias = name if name not in RESERVED else f"_AxonEg{name}"
        line = f"from {module} import {name}" + (f" as {alias}" if alias != name else "")
        if self.imports.setdefault(alias, line) != line:
            raise LookupError(f"two classes named {alias}")
        return alias


def _imported(cls: type, module: torch.nn.Module, key: tuple) -> ClassSource:
    refs = _Refs()
    base = refs.of(cls)
    lines: list[str] = []
    args = _init_args(module, refs)
    lines += sorted(refs.imports.values())
    lines += ["import torch", ""]
    if args is not None:
        lines += ["", "def get_init_inputs():",
                  f'    """{cls.__name__}\'s constructor arguments that rebuild the optimized model\'s module tree '
                  "(ModelNew(*get_init_inputs());\n    its weights: the same seed, or load_state_dict(model.state_dict()))\"\"\"",
                  f"    return [{', '.join(args)}]", ""]
        inputs = _inputs_code(key)
        if inputs is not None:
            lines += ["", "def get_inputs():", '    """Random inputs of the shapes ModelNew was built for."""',
                      f"    return [{', '.join(inputs)}]", ""]
    origin = f"{base if base.startswith('torch.') else cls.__module__ + '.' + cls.__qualname__}, imported (an installed " \
             "library's class)"
    return ClassSource([], "\n".join(lines).rstrip(), base, origin,
                       ["get_init_inputs", "get_inputs"] if args is not None else [])


def _inputs_code(key: tuple) -> list[str] | None:
    """``get_inputs()``'s list: random tensors of the version's signature (``dynamo.signature``), when every
    argument is a floating-point tensor."""
    if not key or not all(len(e) == 3 and isinstance(e[1], torch.dtype) and e[1].is_floating_point for e in key):
        return None
    return [f"torch.randn({tuple(shape)!r}, dtype={dtype!r})" for shape, dtype, _ in key]


def _init_args(module: torch.nn.Module, refs: _Refs) -> list[str] | None:
    """The constructor arguments (expressions) that rebuild ``module``'s tree, checked by rebuilding it on the
    meta device; None when it cannot be written that way."""
    try:
        args = _container_args(module, refs)
        if args is None:
            args = _leaf_args(module, refs, positional=True)
    except LookupError:
        return None
    if args is None:
        return None
    namespace: dict[str, Any] = {"torch": torch}
    for line in refs.imports.values():
        try:
            exec(line, namespace)
        except Exception:  # noqa: BLE001 - an import that fails here would fail in the saved file too
            return None
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rebuilt = eval(f"{refs.of(type(module))}({', '.join(args)})", namespace)  # noqa: S307 - our own expression
    except Exception:  # noqa: BLE001 - a description that does not build: none
        return None
    return args if _same_tree(module, rebuilt) else None


def _same_tree(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    def state(m: torch.nn.Module) -> list[tuple]:
        return [(k, tuple(v.shape), v.dtype) for k, v in [*m.named_parameters(), *m.named_buffers()]]

    types = [(n, type(m)) for n, m in a.named_modules()] == [(n, type(m)) for n, m in b.named_modules()]
    return types and state(a) == state(b) and repr(a) == repr(b)


def _container_args(module: torch.nn.Module, refs: _Refs) -> list[str] | None:
    kind = type(module)
    if kind not in (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict):
        return None
    children = list(module.named_children())
    exprs = [(name, _expr(child, refs)) for name, child in children]
    if kind is torch.nn.Sequential:
        if [n for n, _ in exprs] == [str(i) for i in range(len(exprs))]:
            return [e for _, e in exprs]
        refs.imports["OrderedDict"] = "from collections import OrderedDict"
        return [f"OrderedDict([{', '.join(f'({n!r}, {e})' for n, e in exprs)}])"]
    if kind is torch.nn.ModuleList:
        return [f"[{', '.join(e for _, e in exprs)}]"]
    return ["{" + ", ".join(f"{n!r}: {e}" for n, e in exprs) + "}"]


def _expr(module: torch.nn.Module, refs: _Refs) -> str:
    """A constructor call that builds ``module`` (LookupError when it cannot be written)."""
    args = _container_args(module, refs)
    if args is None:
        args = _leaf_args(module, refs, positional=False)
    if args is None:
        raise LookupError(type(module).__qualname__)
    return f"{refs.of(type(module))}({', '.join(args)})"


def _leaf_args(module: torch.nn.Module, refs: _Refs, positional: bool) -> list[str] | None:
    """The arguments of ``type(module).__init__`` read back from the module's attributes of the same names
    (a ``bias: bool`` parameter from whether the bias tensor exists; ``dtype`` from the parameters); None when
    a required one is not there. ``positional``: all as positional arguments, in order, up to the last one
    known (the root, whose arguments ``get_init_inputs`` returns as a list); else keywords after the leading
    required ones (``Linear(16, 32, bias=True)``)."""
    cls = type(module)
    if not _from_library(cls):
        return None
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    own = [t.dtype for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)] if t.is_floating_point()]
    out: list[tuple[str, str | None, Any]] = []  # (name, expression, or None for the default; the default)
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name == "device":
            expr = None
        elif p.name == "dtype":
            expr = repr(own[0]) if own and own[0] != torch.get_default_dtype() else None
        elif not hasattr(module, p.name):
            expr = None
        else:
            value = getattr(module, p.name)
            if isinstance(p.default, bool) and (value is None or isinstance(value, torch.Tensor)):
                expr = repr(value is not None)
            elif isinstance(value, torch.nn.Module):
                expr = _expr(value, refs)
            else:
                expr = _literal(value)
                if expr is None:
                    return None
        if expr is None and p.default is p.empty:
            return None
        out.append((p.name, expr, p.default))
    if positional:
        last = max((i for i, (_, e, _) in enumerate(out) if e is not None), default=-1)
        args = []
        for _, e, default in out[: last + 1]:
            e = e if e is not None else _literal(default)
            if e is None:
                return None
            args.append(e)
        return args
    args, keyword = [], False
    for name, e, default in out:
        if e is None:
            keyword = True
        elif default is inspect.Parameter.empty and not keyword:
            args.append(e)
        else:
            keyword = True
            args.append(f"{name}={e}")
    return args


def _literal(value: Any) -> str | None:
    """``value`` as Python source when it is a literal (numbers, strings, None, tuples and lists of them)."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else f"float({str(value)!r})"
    if isinstance(value, (tuple, list)):
        items = [_literal(v) for v in value]
        if any(i is None for i in items):
            return None
        body = ", ".join(items) + ("," if isinstance(value, tuple) and len(items) == 1 else "")
        return f"({body})" if isinstance(value, tuple) else f"[{body}]"
    if isinstance(value, torch.dtype):
        return repr(value)
    return None


# ------------------------------------------------------------------------------------------------
# Extraction from the user's file
# ------------------------------------------------------------------------------------------------
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Assign,
                ast.AnnAssign, ast.AugAssign)


def extract(text: str, filename: str, name: str, qualname: str | None = None, module_name: str = "__main__",
            roots: tuple[str, ...] = ("get_inputs", "get_init_inputs")) -> ClassSource:
    """The definition of class ``name`` from the source ``text`` of ``filename`` and what it needs of that
    file (see the module docstring); ``roots``: module-level functions kept too when the file defines them
    (KernelBench's). ``module_name``: the file's module, for relative imports."""
    where = Path(filename).name
    qualname = qualname or name
    if "." in qualname:
        inside = "a function" if "<locals>" in qualname else "another class"
        raise InvalidArgument(f"save: {qualname} is defined inside {inside} ({where}); ModelNew subclasses it, "
                              "so define the class at the top level of its file")
    tree = ast.parse(text, filename)
    table = symtable.symtable(text, filename, "exec")
    body = tree.body
    future = [s for s in body if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
    lazy_annotations = any(a.name == "annotations" for s in future for a in s.names)
    binders: dict[str, list[int]] = {}
    for i, stmt in enumerate(body):
        if stmt in future:
            continue
        for bound in _binds(stmt):
            binders.setdefault(bound, []).append(i)
    if not any(_has_class(body[i], name) for i in binders.get(name, [])):
        raise InvalidArgument(f"save: {where} has no top-level `class {name}`; ModelNew subclasses it, so it must "
                              "be defined at the top level of its file")
    keep: dict[int, set[str]] = {}  # statement -> the names it must bind (an import keeps only those)
    seen: set[str] = set()
    todo = [name] + [r for r in roots if any(isinstance(body[i], (ast.FunctionDef, ast.AsyncFunctionDef))
                                             for i in binders.get(r, []))]
    unresolved: list[str] = []
    while todo:
        wanted = todo.pop()
        if wanted in seen:
            continue
        seen.add(wanted)
        found = binders.get(wanted, [])
        if not found:
            unresolved.append(wanted)
            continue
        usable = [i for i in found if _defines(body[i])]
        if not usable:
            stmt = body[found[0]]
            raise InvalidArgument(f"save: {name} needs {wanted!r}, which {where} sets only at line {stmt.lineno} in a "
                                  f"`{_kind(stmt)}` statement that runs code; define {wanted} with a plain assignment, "
                                  "a def or an import (the saved file keeps definitions only)")
        for i in usable:
            first = i not in keep
            keep.setdefault(i, set()).add(wanted)
            if first:
                todo.extend(_reads(body[i], table, lazy_annotations))
    import builtins

    if any(not hasattr(builtins, n) for n in unresolved):  # names only a star import can give
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                keep.setdefault(i, set()).add("*")
    lines = text.splitlines()
    owner: dict[int, list[int]] = {}
    for i, stmt in enumerate(body):
        for ln in range(_start(stmt), (stmt.end_lineno or stmt.lineno) + 1):
            owner.setdefault(ln, []).append(i)
    parts = []
    for i in sorted(keep):
        stmt = body[i]
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            parts.append(_import_line(stmt, keep[i], name, where, module_name, filename))
            continue
        span = range(_start(stmt), (stmt.end_lineno or stmt.lineno) + 1)
        if any(owner[ln] != [i] for ln in span):  # shares a line with another statement
            parts.append(ast.unparse(stmt))
        else:
            parts.append("\n".join(lines[span.start - 1: span.stop - 1]))
    code = "\n".join(_spaced(parts, [body[i] for i in sorted(keep)]))
    names = sorted({n for i in keep for n in keep[i]} - {"*"})
    return ClassSource([ast.unparse(s) for s in future], code, name, f"{where}: {', '.join(names)}", names)


def _spaced(parts: list[str], stmts: list[ast.stmt]) -> list[str]:
    """Two blank lines around each def and class, one after the imports, as PEP 8 has them."""
    blocks = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    imports = (ast.Import, ast.ImportFrom)
    out: list[str] = []
    for k, (part, stmt) in enumerate(zip(parts, stmts)):
        if k and (isinstance(stmt, blocks) or isinstance(stmts[k - 1], blocks)):
            out += ["", ""]
        elif k and isinstance(stmts[k - 1], imports) and not isinstance(stmt, imports):
            out.append("")
        out.append(part)
    return out


def _start(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _kind(stmt: ast.stmt) -> str:
    return {ast.For: "for", ast.AsyncFor: "async for", ast.While: "while", ast.With: "with", ast.AsyncWith: "async with",
            ast.If: "if", ast.Try: "try", ast.Expr: "expression", ast.Match: "match"}.get(type(stmt), type(stmt).__name__)


def _has_class(stmt: ast.stmt, name: str) -> bool:
    """Whether ``stmt`` is ``class <name>``, or an ``if`` / ``try`` of definitions that holds one."""
    if isinstance(stmt, ast.ClassDef):
        return stmt.name == name
    return isinstance(stmt, (ast.If, ast.Try)) and _defines(stmt) and \
        any(isinstance(n, ast.ClassDef) and n.name == name for n in ast.walk(stmt))


def _is_main_guard(stmt: ast.stmt) -> bool:
    test = getattr(stmt, "test", None)
    return isinstance(stmt, ast.If) and isinstance(test, ast.Compare) and \
        any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(test))


def _defines(stmt: ast.stmt) -> bool:
    """Whether a top-level statement only defines (a def, class, import or assignment; an ``if`` / ``try``
    of those, such as a guarded import), so that running it runs nothing of the user's script."""
    if isinstance(stmt, _DEFINITIONS):
        return True
    if isinstance(stmt, ast.If):
        return not _is_main_guard(stmt) and all(_defines_or_pass(s) for s in stmt.body + stmt.orelse)
    if isinstance(stmt, ast.Try):
        inner = stmt.body + stmt.orelse + stmt.finalbody + [s for h in stmt.handlers for s in h.body]
        return all(_defines_or_pass(s) for s in inner)
    return False


def _defines_or_pass(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)) \
        or _defines(stmt)


def _binds(stmt: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds (or changes: ``CONFIG["a"] = 1`` changes CONFIG)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in stmt.names}
    if isinstance(stmt, ast.ImportFrom):
        return {a.asname or a.name for a in stmt.names if a.name != "*"}
    if isinstance(stmt, ast.Assign):
        return {n for t in stmt.targets for n in _target_names(t)}
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return _target_names(stmt.target)
    out: set[str] = set()
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        out |= _target_names(stmt.target)
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        out |= {n for item in stmt.items if item.optional_vars is not None for n in _target_names(item.optional_vars)}
    for name in ("body", "orelse", "finalbody"):
        for s in getattr(stmt, name, []) or []:
            out |= _binds(s)
    for h in getattr(stmt, "handlers", []) or []:
        out |= {h.name} if h.name else set()
        for s in h.body:
            out |= _binds(s)
    for case in getattr(stmt, "cases", []) or []:
        for s in case.body:
            out |= _binds(s)
    for node in ast.walk(stmt) if isinstance(stmt, ast.Expr) else []:
        if isinstance(node, ast.NamedExpr):
            out.add(node.target.id)
    return out


def _target_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {n for e in target.elts for n in _target_names(e)}
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    if isinstance(target, (ast.Attribute, ast.Subscript)):
        base = target.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        return {base.id} if isinstance(base, ast.Name) else set()
    return set()


def _reads(stmt: ast.stmt, table: symtable.SymbolTable, lazy_annotations: bool) -> set[str]:
    """The module-level names a kept statement reads: for a def or class, what its scopes read as globals
    (``symtable``) and what runs at module level (decorators, bases, defaults, annotations unless lazy);
    for anything else every name in it."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        outer: list[ast.AST] = list(stmt.decorator_list)
        if isinstance(stmt, ast.ClassDef):
            outer += stmt.bases + [k.value for k in stmt.keywords]
        else:
            a = stmt.args
            outer += [d for d in a.defaults + a.kw_defaults if d is not None]
            if not lazy_annotations:
                outer += [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]
                          if x is not None and x.annotation is not None]
                outer += [stmt.returns] if stmt.returns is not None else []
        names = {n.id for node in outer for n in ast.walk(node) if isinstance(n, ast.Name)}
        scopes = [t for t in table.get_children() if t.get_name() == stmt.name and t.get_lineno() in
                  (stmt.lineno, _start(stmt))] or [t for t in table.get_children() if t.get_name() == stmt.name]
        for scope in scopes[:1]:
            names |= _globals(scope)
        return names
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}


def _globals(scope: symtable.SymbolTable) -> set[str]:
    out = {s.get_name() for s in scope.get_symbols() if s.is_global() and s.is_referenced()}
    for child in scope.get_children():
        out |= _globals(child)
    return out


def _import_line(stmt: ast.Import | ast.ImportFrom, wanted: set[str], cls: str, where: str, module_name: str,
                 filename: str) -> str:
    """The import statement with only the names that are needed, made absolute; InvalidArgument for axon_eg."""
    if isinstance(stmt, ast.Import):
        aliases = [a for a in stmt.names if (a.asname or a.name.split(".")[0]) in wanted]
        modules = [a.name for a in aliases]
        node: ast.Import | ast.ImportFrom = ast.Import(names=aliases)
    else:
        aliases = [a for a in stmt.names if (a.asname or a.name) in wanted or a.name == "*"]
        module = stmt.module or ""
        if stmt.level:
            package = module_name if Path(filename).stem == "__init__" else module_name.rpartition(".")[0]
            parts = package.split(".") if package else []
            if module_name == "__main__" or len(parts) < stmt.level:
                raise InvalidArgument(f"save: {cls} needs a relative import ({where}:{stmt.lineno}) and its file is not "
                                      "part of a package here; write the import absolute")
            module = ".".join(parts[: len(parts) - stmt.level + 1] + ([module] if module else []))
        modules = [module]
        node = ast.ImportFrom(module=module, names=aliases, level=0)
    for m in modules:
        if m.split(".")[0] == "axon_eg":
            raise InvalidArgument(f"save: {cls} uses axon_eg ({where}:{stmt.lineno} imports {m}); the saved file imports "
                                  "torch and triton only, so the model's own code cannot call axon_eg")
    return ast.unparse(node)


# ------------------------------------------------------------------------------------------------
# The file
# ------------------------------------------------------------------------------------------------
_LOADER = '''
def _axon_eg_kernel(name, source):
    """Run one embedded kernel file as its own module (its source registered with linecache, where
    triton.jit reads a function's source, under a name of its own: two saved files in one process keep
    their kernels apart) and return its entry point."""
    import hashlib
    import linecache
    import sys
    import types

    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<axon_eg kernel {name} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f"axon_eg_saved_{name}_{digest}")
    module.__file__ = filename
    sys.modules[module.__name__] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module.kernel


def _axon_eg_region(name, source, shapes, dtypes, returns, single, where, extras=()):
    """A region's kernel called as the graph calls it, through an opaque custom op (``axon_eg_saved::``, so
    ``torch.compile`` of the graph schedules around it): contiguous inputs, outputs allocated here (a kernel
    written to return its outputs, ``returns``, is given none); meta inputs give meta outputs of ``shapes``
    and ``dtypes`` and run nothing (the op's fake); ``where`` places each output of the region outside the
    op (an op's outputs never alias its inputs): ("out", k) the kernel's k-th, ("in", k) the k-th argument
    itself; ``extras`` are inputs made from constants of forward (torch.arange), (position, values, dtype),
    inserted where the kernel takes them."""
    import hashlib

    kernel = _axon_eg_kernel(name, source)

    def computed(args):
        args = [a.contiguous() for a in args]
        device = args[0].device
        for pos, values, dtype in extras:
            args.insert(pos, torch.tensor(values, dtype=dtype, device=device))
        if returns:  # row-major, as the fake says: a library call's output may come in the library's order
            outs = kernel(*args)
            return [o if o.is_contiguous() else o.contiguous() for o in (outs if isinstance(outs, (tuple, list)) else [outs])]
        outs = [torch.empty(s, dtype=d, device=device) for s, d in zip(shapes, dtypes)]
        kernel(*args, *outs)
        return outs

    def fake(args):
        return [torch.empty(s, dtype=d, device=args[0].device) for s, d in zip(shapes, dtypes)]

    op_name = f"{name}_{hashlib.sha256((source + repr((shapes, dtypes, extras))).encode()).hexdigest()[:16]}"
    if not hasattr(torch.ops.axon_eg_saved, op_name):  # the same file imported twice shares its ops
        _AXON_EG_LIB.define(f"{op_name}(Tensor[] args) -> Tensor[]")
        _AXON_EG_LIB.impl(op_name, computed, "CompositeExplicitAutograd")
        torch.library.register_fake(f"axon_eg_saved::{op_name}", fake, lib=_AXON_EG_LIB)
    op = getattr(torch.ops.axon_eg_saved, op_name).default

    def run(*args):
        outs = op(list(args))
        if where is not None:
            outs = [outs[k] if kind == "out" else args[k] for kind, k in where]
        return outs[0] if single else tuple(outs)
    return run


_AXON_EG_LIB = torch.library.Library("axon_eg_saved", "FRAGMENT")  # the regions' custom ops live while the file does
'''


def write(optimized: Any, path: Path) -> Path:
    """:meth:`axon_eg.dynamo.OptimizedModule.save` (see the module docstring)."""
    from torch.utils import _pytree as pytree

    cls = type(optimized.original)
    key, graph_module = next(iter(optimized.compiled.graphs.items()))
    if not isinstance(graph_module, torch.fx.GraphModule) or graph_module is optimized.original:
        raise InvalidArgument(f"save: {cls.__name__} runs as torch code (it could not be exported); nothing to save")
    source = class_source(optimized.original, key)
    with warnings.catch_warnings():  # torch's own deprecation inside copying a pytree spec
        warnings.simplefilter("ignore", FutureWarning)
        graph = copy.deepcopy(graph_module.graph)
    out_spec = graph._codegen.pytree_info.out_spec if hasattr(graph._codegen, "pytree_info") else None
    for node in list(graph.nodes):  # the export's own input check: the kernels check their arguments
        if node.op == "call_module" and node.target == "_guards_fn":
            graph.erase_node(node)
    _portable(graph)
    graph._codegen = torch.fx.graph.CodeGen()
    code = graph.python_code("self").src.replace("def forward(self", "def _axon_eg_graph(self", 1)
    parts = [*source.future,
             f"# ModelNew written by axon_eg {_version()}: the model's class, its kernels and ModelNew. Importing this",
             "# file runs nothing but definitions; it imports torch and triton (and what the model's class imports).",
             f"# ===== the model's class ({source.origin})", source.code, "", "",
             "# ===== axon_eg: each region's kernel and the graph that calls them",
             "import torch  # noqa: E402", "from torch.utils import _pytree as _axon_eg_pytree  # noqa: E402",
             *(f"{line}  # noqa: E402,F401 - torch.fx writes this name in graph code" for line in _fx_builtins()),
             "", "", _LOADER.strip(), "", "", *_interpreter_fixes(),
             "_AXON_EG_DEVICE = torch.device('cpu')  # the device of the inputs of the latest call: tensors the graph "
             "creates go there", "", ""]
    regions = []
    for name, child in graph_module.named_children():
        if isinstance(child, RegionKernel):
            program = child.best.program
            returns = child.best.mode == "return"
            shapes = [tuple(program.concrete_shape(o)) for o in program.outputs]
            dtypes = [f"torch.{program.nodes[o].dtype.torch_name}" for o in program.outputs]
            parts += [f"_AXON_EG_{name.upper()} = {child.best.path.read_text()!r}", ""]
            regions.append(f"    {name} = staticmethod(_axon_eg_region({name!r}, _AXON_EG_{name.upper()}, "
                           f"{shapes!r}, [{', '.join(dtypes)}], {returns!r}, {child.single!r}, {child.where!r}, "
                           f"[{', '.join(f'({p}, {v!r}, {d})' for p, v, d in child.extras)}]))")
        elif isinstance(child, torch.fx.GraphModule):  # a region left to torch: its aten ops as a function
            sub = copy.deepcopy(child.graph)
            _portable(sub)
            sub._codegen = torch.fx.graph.CodeGen()
            parts += [sub.python_code("self").src.replace("def forward(self", f"def _axon_eg_{name}(self", 1), ""]
            regions.append(f"    def {name}(self, *args):\n        return _axon_eg_{name}(self, *args)")
    parts += [code, ""]
    spec = pytree.treespec_dumps(out_spec) if out_spec is not None else None
    base = source.base
    rest = optimized.compiled.opts.get("rest", "eager")
    kept = any(isinstance(child, RegionKernel) for child in graph_module.children())
    parts += [f"_AXON_EG_OUT_SPEC = {spec!r}",
              f"_AXON_EG_REST = {rest!r}  # 'inductor': forward runs the graph through torch.compile, the regions opaque",
              f"_AXON_EG_KEPT = {kept!r}  # False: no region beat Inductor; forward is torch.compile of the class's own",
              "", "",
              f"class ModelNew({base}):",
              f'    """{cls.__name__} with axon_eg\'s kernels: the same __init__ (so the same parameters from the same '
              'seed),\n    forward through the kernels (for the inputs\' shapes it was built for; meta tensors give '
              'meta tensors)."""',
              "", *regions, "",
              "    @classmethod",
              "    def from_module(cls, module):",
              f'        """A ModelNew of ``module``, a {cls.__name__} already built (and loaded): its submodules, '
              'parameters\n        and buffers shared, not copied."""',
              f"        if not any(c.__name__ == {cls.__name__!r} for c in type(module).__mro__):",
              f"            raise TypeError(f'ModelNew.from_module takes a {cls.__name__}, got {{type(module).__name__}}')",
              "        new = cls.__new__(cls)",
              "        new.__dict__.update({k: (v.copy() if isinstance(v, dict) else v) for k, v in module.__dict__.items()})",
              "        return new",
              "",
              "    def forward(self, *args):",
              "        global _AXON_EG_DEVICE",
              "        _AXON_EG_DEVICE = next((a.device for a in args if isinstance(a, torch.Tensor)), _AXON_EG_DEVICE)",
              "        if _AXON_EG_REST == 'inductor' and _AXON_EG_DEVICE.type != 'meta':",
              "            compiled = self.__dict__.get('_axon_eg_compiled')",
              "            if compiled is None:",
              "                compiled = self.__dict__['_axon_eg_compiled'] = torch.compile(",
              "                    _axon_eg_graph if _AXON_EG_KEPT else super().forward)",
              "            if not _AXON_EG_KEPT:",
              "                return compiled(*args)",
              "            out = compiled(self, *args)",
              "        else:",
              "            out = _axon_eg_graph(self, *args)",
              "        if _AXON_EG_OUT_SPEC is None:",
              "            return out",
              "        leaves = list(out) if isinstance(out, (tuple, list)) else [out]",
              "        return _axon_eg_pytree.tree_unflatten(leaves, _axon_eg_pytree.treespec_loads(_AXON_EG_OUT_SPEC))",
              ""]
    text = "\n".join(parts)
    compile(text, str(path), "exec")  # a file that does not parse is a bug here, not the user's to find later
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


class _CallersDevice:
    """Written as ``_AXON_EG_DEVICE`` in the saved graph: the device of the call's inputs."""

    def __repr__(self) -> str:
        return "_AXON_EG_DEVICE"


def _portable(graph: torch.fx.Graph) -> None:
    """The graph free of the device it was exported on (the remote flow exports on the meta device, the
    saved file runs on a GPU): a tensor the graph creates goes to the device of the call's inputs."""
    drop_asserts(graph)
    for node in graph.nodes:
        if isinstance(node.kwargs.get("device"), torch.device):
            node.kwargs = {**node.kwargs, "device": _CallersDevice()}


def _interpreter_fixes() -> list[str]:
    """The Triton interpreter's work-arounds (``backends.triton.interpreter``: bf16 ``tl.dot`` on bit patterns,
    truncating bf16 casts), copied into the saved file under names of its own and applied at its import
    (each a no-op unless ``TRITON_INTERPRET=1``): the file runs its kernels on a CPU as axon_eg does."""
    parts = ["import os  # noqa: E402,F401 - the interpreter's work-arounds read TRITON_INTERPRET", ""]
    for fn in (interpreter.widen_bf16_dots, interpreter.round_bf16_to_nearest_even):
        parts += [inspect.getsource(fn).replace(f"def {fn.__name__}(", f"def _axon_eg_{fn.__name__}(", 1), "",
                  f"_axon_eg_{fn.__name__}()", "", ""]
    return parts


def _fx_builtins() -> list[str]:
    """The imports that make the names torch.fx writes in generated code (``inf``, ``nan``, ``device``,
    ``NoneType``, ...: its custom builtins) defined in the saved file, ``import torch`` aside."""
    from torch.fx.graph import _custom_builtins

    return sorted({b.import_str for b in _custom_builtins.values()} - {"import torch"})


def _version() -> str:
    return __version__


__all__ = ["RESERVED", "ClassSource", "class_source", "extract", "write"]
