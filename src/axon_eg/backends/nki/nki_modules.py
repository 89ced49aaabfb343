"""The fake ``nki`` / ``neuronxcc.nki`` modules a kernel imports while the simulator runs it: ``@nki.jit``, the
module objects (each holding the public attributes of a :mod:`.nki_namespaces` object over the session), the
import hook that hands them out, their installation in ``sys.modules`` (never over a real installed package),
and reading a kernel's source."""

from __future__ import annotations

import builtins
import contextlib
import importlib.util
import inspect
import linecache
import sys
import textwrap
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .isa import NkiSimulationError
from .nki_isa_namespaces import Isa, LegacyIsa
from .nki_namespaces import Language, members
from .nki_values import CURRENT, ROOTS
from .session import Session

_LOCK = threading.RLock()  # one kernel's modules in sys.modules at a time
_MISSING = object()


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


def fake_modules(s: Session) -> dict[str, types.ModuleType]:
    """The modules of ``s``'s dialect by their import names (``nki``, ``nki.language`` ... or ``neuronxcc`` ...)."""
    prefix = "nki" if s.dialect == CURRENT else "neuronxcc.nki"
    lang = _module(f"{prefix}.language", members(Language(s)))
    isa_module = _module(f"{prefix}.isa", members(Isa(s) if s.dialect == CURRENT else LegacyIsa(s)))
    top = {"jit": _jit, "baremetal": _jit, "language": lang, "isa": isa_module}
    if s.dialect == CURRENT:
        return {"nki": _module("nki", top), "nki.language": lang, "nki.isa": isa_module}
    annotation = type("tensor", (), {"__class_getitem__": classmethod(lambda cls, item: cls)})  # tensor[128, 512]
    typing = _module("neuronxcc.nki.typing", {"tensor": annotation})
    nki = _module("neuronxcc.nki", {**top, "typing": typing})
    return {"neuronxcc": _module("neuronxcc", {"nki": nki}), "neuronxcc.nki": nki, "neuronxcc.nki.language": lang,
            "neuronxcc.nki.isa": isa_module, "neuronxcc.nki.typing": typing}


def importer(modules: Mapping[str, types.ModuleType], dialect: str) -> Callable[..., Any]:
    """The kernel's ``__import__``: ``modules`` for the NKI packages, the real import for anything else."""
    real = builtins.__import__

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002, N807
        root = name.partition(".")[0]
        if level == 0 and root in ROOTS.values():
            if name not in modules:
                other = next(d for d, r in ROOTS.items() if r == root)
                raise NkiSimulationError(f"the kernel imports {name}, which the simulator does not provide"
                                         + (f" in the {dialect} dialect (its modules are {other}'s)" if other != dialect
                                            else ""))
            return modules[name] if fromlist else modules[root]
        return real(name, globals, locals, fromlist, level)

    return __import__


def really_installed(root: str) -> bool:
    """Whether the real package ``root`` (``nki``, ``neuronxcc``) is installed (our stand-ins do not count)."""
    module = sys.modules.get(root)
    if module is not None:
        return not getattr(module, "__axon_nki_fake__", False)
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def installed(modules: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """Our modules in ``sys.modules`` while the kernel runs, except over a real installed nki/neuronxcc."""
    with _LOCK:
        saved: dict[str, Any] = {}
        real = {root for root in {n.partition(".")[0] for n in modules} if really_installed(root)}
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


def kernel_source(kernel: Any) -> tuple[str, str, str | None]:
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


def pick_kernel(namespace: Mapping[str, Any], name: str | None) -> Callable[..., Any]:
    """The kernel to run: the one named, else the only ``@nki.jit`` function of the source."""
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


def kernel_line(error: BaseException, filename: str) -> int | None:
    """The last line of the kernel's file in ``error``'s traceback (None when the kernel is not in it)."""
    tb, line = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
