"""axon_eg: a superoptimizer for tensor programs (egglog e-graphs, Z3-proven rewrites, Triton/NKI).

Imports are lazy so that ``axon_eg.measure`` can run on a bare GPU box with numpy, torch and triton.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    # front ends and IR
    "program": "axon_eg.ir.frontend",
    "Tensor": "axon_eg.ir.frontend",
    "TensorSpec": "axon_eg.ir.frontend",
    "Program": "axon_eg.ir.program",
    "Builder": "axon_eg.ir.builder",
    "InputSpec": "axon_eg.ir.program",
    "interpret": "axon_eg.ir.interpret",
    "from_torch": "axon_eg.ir.torch_import",
    "load_problem": "axon_eg.ir.torch_import",
    "Problem": "axon_eg.ir.torch_import",
    "random_inputs": "axon_eg.ir.inputs",
    # dtypes
    "bf16": "axon_eg.ir.dtypes",
    "fp16": "axon_eg.ir.dtypes",
    "fp32": "axon_eg.ir.dtypes",
    "fp64": "axon_eg.ir.dtypes",
    "int32": "axon_eg.ir.dtypes",
    "int64": "axon_eg.ir.dtypes",
    "bool_": "axon_eg.ir.dtypes",
    "DType": "axon_eg.ir.dtypes",
    "errors": "axon_eg.errors",
    # the pipeline and its tables
    "saturate_and_extract": "axon_eg.pipeline",
    "optimize": "axon_eg.dynamo",
    "optimize_triton": "axon_eg.triton_in",
    "write_bundle_only": "axon_eg.pipeline",
    "Result": "axon_eg.result",
    "results": "axon_eg.measure.tables",
}


def __getattr__(name: str) -> Any:
    """``ax.NAME``: the lazy names above, the front end's ops, or a submodule (``ax.validate``).

    Anything else raises ``axon_eg.errors.UnknownName`` (an AttributeError) naming the user's line and
    what was probably meant: ``ax.softmaxx`` -> ax.softmax, ``ax.float32`` -> ax.fp32, ``ax.int32`` -> the dtypes."""
    import importlib
    import importlib.util

    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        return module if name == "errors" else getattr(module, name)
    if name.startswith("__"):  # protocol probes (__path__, __wrapped__, ...): the plain error, quickly
        raise AttributeError(f"module 'axon_eg' has no attribute {name!r}")
    if name.isidentifier() and importlib.util.find_spec(f"axon_eg.{name}") is not None:
        return importlib.import_module(f"axon_eg.{name}")
    frontend = importlib.import_module("axon_eg.ir.frontend")
    if name in frontend.__all__:  # ax.exp, ax.softmax, ... generated from the registry
        return getattr(frontend, name)
    raise frontend.unknown_name(name, __dir__())


def __dir__() -> list[str]:
    import importlib

    return sorted(set(globals()) | set(_LAZY) | set(importlib.import_module("axon_eg.ir.frontend").__all__))
