"""The fake ``nki`` / ``neuronxcc.nki`` modules a kernel imports while the simulator runs it: ``@nki.jit``, the
module objects (over the namespaces of :mod:`.nki_namespaces`), the import hook that hands them out, their
installation in ``sys.modules`` (never over a real installed package), and reading a kernel's source."""

from __future__ import annotations

import builtins
import contextlib
import importlib.util
import inspect
import linecache
import sys
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .isa import NkiSimulationError
from .nki_namespaces import _current_isa, _language, _legacy_isa
from .nki_values import _LOCK, _MISSING, _ROOTS, CURRENT

if TYPE_CHECKING:  # annotations only: the session lives in simulator.py, which imports this module
    from .simulator import _Session


class _Kernel:
    """What ``@nki.jit`` makes of a kernel function in the simulator: the function itself, callable."""

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any]):
        self.fn, self.options, self.__name__ = fn, dict(options), fn.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    return (lambda f: _Kernel(f, options)) if fn is None else _Kernel(fn, options)


def _module(name: str, attrs: Mapping[str, Any]) -> types.ModuleType:
    module = types.ModuleType(name, f"axon_eg NKI simulator stand-in for {name}")
    module.__dict__.update(attrs)
    module.__axon_nki_fake__ = True

    def __getattr__(attr: str) -> Any:  # noqa: N807 - module-level __getattr__ (PEP 562)
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise NotImplementedError(f"{name}.{attr} is not supported by the axon_eg NKI simulator")

    module.__getattr__ = __getattr__
    return module


def _modules(s: _Session) -> dict[str, types.ModuleType]:
    prefix = "nki" if s.dialect == CURRENT else "neuronxcc.nki"
    lang = _module(f"{prefix}.language", _language(s))
    isa_module = _module(f"{prefix}.isa", _current_isa(s) if s.dialect == CURRENT else _legacy_isa(s))
    top = {"jit": _jit, "baremetal": _jit, "language": lang, "isa": isa_module}
    if s.dialect == CURRENT:
        return {"nki": _module("nki", top), "nki.language": lang, "nki.isa": isa_module}
    annotation = type("tensor", (), {"__class_getitem__": classmethod(lambda cls, item: cls)})  # tensor[128, 512]
    typing = _module("neuronxcc.nki.typing", {"tensor": annotation})
    nki = _module("neuronxcc.nki", {**top, "typing": typing})
    return {"neuronxcc": _module("neuronxcc", {"nki": nki}), "neuronxcc.nki": nki, "neuronxcc.nki.language": lang,
            "neuronxcc.nki.isa": isa_module, "neuronxcc.nki.typing": typing}


def _importer(modules: Mapping[str, types.ModuleType], dialect: str) -> Callable[..., Any]:
    real = builtins.__import__

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002, N807
        root = name.partition(".")[0]
        if level == 0 and root in _ROOTS.values():
            if name not in modules:
                other = next(d for d, r in _ROOTS.items() if r == root)
                raise NkiSimulationError(f"the kernel imports {name}, which the simulator does not provide"
                                         + (f" in the {dialect} dialect (its modules are {other}'s)" if other != dialect
                                            else ""))
            return modules[name] if fromlist else modules[root]
        return real(name, globals, locals, fromlist, level)

    return __import__


def _really_installed(root: str) -> bool:
    module = sys.modules.get(root)
    if module is not None:
        return not getattr(module, "__axon_nki_fake__", False)
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def _installed(modules: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """Our modules in ``sys.modules`` while the kernel runs, except over a real installed nki/neuronxcc."""
    with _LOCK:
        saved: dict[str, Any] = {}
        real = {root for root in {n.partition(".")[0] for n in modules} if _really_installed(root)}
        for name, module in modules.items():
            if name.partition(".")[0] not in real:
                saved[name] = sys.modules.get(name, _MISSING)
                sys.modules[name] = module
        try:
            yield
        finally:
            for name, old in saved.items():
                if old is _MISSING:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = old


def _source(kernel: Any) -> tuple[str, str, str | None]:
    """(source text, file name for tracebacks, kernel name) of source text, a Path or a function."""
    if isinstance(kernel, Path):
        return kernel.read_text(encoding="utf-8"), str(kernel.resolve()), None
    if isinstance(kernel, str):
        filename = f"<nki-kernel-{abs(hash(kernel)):x}>"
        linecache.cache[filename] = (len(kernel), None, kernel.splitlines(True), filename)
        return kernel, filename, None
    fn = getattr(kernel, "fn", kernel)
    if not inspect.isfunction(fn):
        raise NkiSimulationError(f"simulate() takes kernel source text, a Path or a function, got {type(kernel).__name__}")
    lines, first = inspect.getsourcelines(fn)
    return "\n" * (first - 1) + textwrap.dedent("".join(lines)), inspect.getsourcefile(fn) or "<kernel>", fn.__name__


def _pick(namespace: Mapping[str, Any], name: str | None) -> Callable[..., Any]:
    kernels = sorted(k for k, v in namespace.items() if isinstance(v, _Kernel))
    if name is not None:
        if not callable(namespace.get(name)):
            raise NkiSimulationError(f"no kernel named {name!r} in the source; @nki.jit kernels: {kernels or 'none'}")
        obj = namespace[name]
    elif len(kernels) == 1:
        obj = namespace[kernels[0]]
    else:
        raise NkiSimulationError(f"{'several' if kernels else 'no'} @nki.jit kernels in the source ({kernels}); "
                                 f"pass kernel_name=")
    return obj.fn if isinstance(obj, _Kernel) else obj


def _kernel_line(error: BaseException, filename: str) -> int | None:
    tb, line = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
