"""What every candidate of ``optimize-triton`` is called with, settled before anything runs: the inputs'
shapes and dtypes, the ``__init__`` arguments, the module constants set (the sizes), and, from the reference
``Model`` run on fake tensors (shapes and dtypes only, no memory), its parameters and outputs.

The inputs come from a YAML spec (the Triton-to-Triton form) or from the reference file's ``get_inputs()`` and
``get_init_inputs()`` (the KernelBench form). A spec is checked whole first, every error one line naming the
file and the key (``spec FILE: inputs[0].dtype: unknown dtype 'float32' (did you mean 'fp32'? ...)``)::

    inputs:                       # required: one entry per forward() argument
      - {shape: [4096, 4096], dtype: fp32}   # shape: ints >= 1; dtype (default fp32); positive: bool; high: int
    init: [4096]                  # the __init__ arguments (default none)
    small:                        # optional: the inputs and init of a quick run (under the Triton interpreter)
      inputs:
        - {shape: [6, 300], dtype: fp32}
      init: [300]

Xe-Forge's form of a spec (inputs by name over symbolic dims, ``inits``, size-set sections) is read by
:mod:`axon_eg.triton_in.xeforge`.

Sizes: under ``small`` a spec's ``small`` section (none: its inputs, and the line says so), or a
KernelBench-format reference's ``SMALL_SIZES`` (``axon_eg.loading.kernelbench_sizes``, as ``axon-eg
optimize`` chooses them); ``sizes`` sets module constants over those. Then the reference ``Model(*init)`` is
built and called on fake inputs: inputs that do not fit ``init`` are refused naming both keys.
"""

from __future__ import annotations

import difflib
import importlib.util
import itertools
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from axon_eg.errors import InvalidArgument
from axon_eg.loading import kernelbench_sizes

from .source import TritonInputError

SPEC_KEYS = ("inputs", "init", "small")
SMALL_KEYS = ("inputs", "init")
INPUT_KEYS = ("shape", "dtype", "positive", "high")
"""An input entry: ``shape`` (required), ``dtype`` (default fp32), ``positive`` (values in 0.5 .. 2: a log's or
a square root's operand), ``high`` (an index input: values in 0 .. high - 1), as the harness makes them."""
DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "f32": "fp32", "float16": "fp16", "half": "fp16", "f16": "fp16",
                 "bfloat16": "bf16", "float64": "fp64", "double": "fp64", "f64": "fp64", "long": "int64", "int": "int64",
                 "bool_": "bool", "i32": "int32", "i64": "int64"}
"""torch's and NumPy's names of the harness's dtypes, for the did-you-mean of an unknown dtype."""

_counter = itertools.count()


@dataclass(frozen=True)
class Harness:
    """The call every candidate gets. ``inputs``: the manifest's input specs (name, shape, dtype, ...);
    ``init``: the ``__init__`` arguments; ``constants``: module-level constants set in the reference (and in a
    KernelBench-form input, which is its own reference) before anything is built; ``parameters``: (elements,
    bytes per element) of the reference ``Model(*init)``'s parameters and buffers; ``outputs``: (shape, bytes
    per element) of its outputs, None when the fake run could not tell (a forward that reads values);
    ``note``: one line saying which sizes and why; ``at``: the sizes in a few words."""

    inputs: list[dict[str, Any]]
    init: list[Any]
    constants: dict[str, int]
    parameters: list[tuple[int, int]]
    outputs: list[tuple[list[int], int]] | None
    note: str
    at: str
    flop: float | None = None
    """The floating-point operations of one call (an Xe-Forge size set's ``flop``), for achieved TFLOP/s."""

    def tensors(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(inputs and parameters, outputs) as (elements, bytes per element): ``validate.phase2_size``'s."""
        from math import prod

        from axon_eg.measure.harness import TORCH_DTYPES  # lazy: loads torch; importing triton_in.run does not

        ins = [(prod(s["shape"]), TORCH_DTYPES[s["dtype"]].itemsize) for s in self.inputs] + list(self.parameters)
        outs = [(prod(shape), size) for shape, size in self.outputs or []]
        return ins, outs

    def describe(self) -> str:
        """The inputs in a few words: ``x0 [5, 77] fp32, x1 [5, 77] fp32``."""
        items = [f"{s['name']} {list(s['shape'])} {s['dtype']}" for s in self.inputs]
        return ", ".join(items[:4]) + (", ..." if len(items) > 4 else "")


# ------------------------------------------------------------------------------------------------
# The spec
# ------------------------------------------------------------------------------------------------
def read_spec(spec: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """(the spec checked whole and normalized: ``inputs``, ``init``, ``small`` (None or its ``inputs`` and
    ``init``), the name errors give it: ``spec FILE`` or ``spec``). TritonInputError naming the key otherwise."""
    if isinstance(spec, Mapping):
        return check_spec(spec, "spec"), "spec"
    import yaml

    p = Path(spec)
    where = f"spec {p}"
    if not p.is_file():
        raise TritonInputError(f"{where}: no such spec file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise TritonInputError(f"{where}: not YAML ({str(exc).splitlines()[0]})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TritonInputError(f"{where}: cannot read it ({exc})") from None
    return check_spec(data, where), where


def check_spec(data: Any, where: str = "spec") -> dict[str, Any]:
    """A spec (the YAML's data) checked whole: see the module docstring, and :mod:`.xeforge` for Xe-Forge's form
    (its inputs a mapping by name): then ``xeforge`` holds it checked, and ``inputs`` and ``init`` are those of
    the size set :func:`harness` chooses. Returns it normalized."""
    from . import xeforge  # lazy: it imports this module's helpers

    if xeforge.is_xeforge(data):
        return {"xeforge": xeforge.check(data, where), "inputs": None, "init": None, "small": None}
    if not isinstance(data, Mapping):
        raise TritonInputError(f"{where}: a spec is a mapping with inputs (and optionally init, small), got "
                               f"{_kind(data)}")
    _keys(data, SPEC_KEYS, where, "", "a spec has inputs, init and small")
    small = data.get("small")
    if small is not None:
        if not isinstance(small, Mapping):
            raise TritonInputError(f"{where}: small: must be a mapping with inputs (and optionally init), got {_kind(small)}")
        _keys(small, SMALL_KEYS, where, "small.", "small has inputs and init")
        small = _section(small, where, "small.")
    return {**_section(data, where, ""), "small": small, "xeforge": None}


def _section(data: Mapping[str, Any], where: str, prefix: str) -> dict[str, Any]:
    if "inputs" not in data:
        raise TritonInputError(f"{where}: {prefix}inputs is missing (a list of {{shape: [...], dtype: fp32}}, one "
                               "per forward() argument)")
    inputs = data["inputs"]
    if not isinstance(inputs, list) or not inputs:
        raise TritonInputError(f"{where}: {prefix}inputs: must be a non-empty list of {{shape: [...], dtype: fp32}}, "
                               f"got {_kind(inputs)}")
    out = [_input(item, where, f"{prefix}inputs[{i}]", i) for i, item in enumerate(inputs)]
    init = data.get("init", [])
    if init is None:
        init = []
    if not isinstance(init, list):
        raise TritonInputError(f"{where}: {prefix}init: must be a list of the __init__ arguments (e.g. [4096]), got "
                               f"{_kind(init)}")
    return {"inputs": out, "init": list(init)}


def _input(item: Any, where: str, key: str, i: int) -> dict[str, Any]:
    from axon_eg.measure.harness import TORCH_DTYPES  # lazy: loads torch; importing triton_in.run does not

    if not isinstance(item, Mapping):
        raise TritonInputError(f"{where}: {key}: must be a mapping {{shape: [...], dtype: fp32}}, got {_kind(item)}")
    _keys(item, INPUT_KEYS, where, f"{key}.", "an input has " + ", ".join(INPUT_KEYS))
    if "shape" not in item:
        raise TritonInputError(f"{where}: {key}.shape is missing (a list of ints >= 1, e.g. [4096, 4096])")
    shape = item["shape"]
    if not isinstance(shape, list) or not all(type(d) is int and d >= 1 for d in shape):
        raise TritonInputError(f"{where}: {key}.shape: must be a list of ints >= 1 (e.g. [4096, 4096]), got {shape!r}")
    dtype = item.get("dtype", "fp32")
    if not isinstance(dtype, str) or dtype not in TORCH_DTYPES:
        text = str(dtype).removeprefix("torch.").removeprefix("np.").removeprefix("numpy.")
        near = DTYPE_ALIASES.get(text) or next(iter(difflib.get_close_matches(text, list(TORCH_DTYPES), 1, 0.5)), None)
        mean = f"did you mean {near!r}? " if near else ""
        raise TritonInputError(f"{where}: {key}.dtype: unknown dtype {dtype!r} ({mean}one of {', '.join(TORCH_DTYPES)})")
    out: dict[str, Any] = {"name": f"x{i}", "shape": list(shape), "dtype": dtype}
    if "positive" in item:
        if not isinstance(item["positive"], bool):
            raise TritonInputError(f"{where}: {key}.positive: must be true or false, got {item['positive']!r}")
        if item["positive"]:
            out["positive"] = True
    if "high" in item:
        high = item["high"]
        if type(high) is not int or high < 1:
            raise TritonInputError(f"{where}: {key}.high: must be an int >= 1 (an index input's bound), got {high!r}")
        out["high"] = high
    return out


def _keys(data: Mapping[str, Any], known: tuple[str, ...], where: str, prefix: str, has: str) -> None:
    for key in data:
        if key in known:
            continue
        near = difflib.get_close_matches(str(key), known, 1, 0.6)
        mean = f"did you mean '{prefix}{near[0]}'? " if near else ""
        raise TritonInputError(f"{where}: unknown key '{prefix}{key}' ({mean}{has})")


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


# ------------------------------------------------------------------------------------------------
# The harness's call
# ------------------------------------------------------------------------------------------------
def harness(ref_path: str | os.PathLike[str], spec: str | os.PathLike[str] | Mapping[str, Any] | None = None, *,
            small: bool = False, sizes: Mapping[str, int] | str | None = None) -> Harness:
    """The call of every candidate, from ``spec`` (its ``small`` section under ``small`` when it has one) or from
    the reference file's ``get_inputs()`` / ``get_init_inputs()`` (under ``small`` at its ``SMALL_SIZES``;
    ``sizes`` sets module constants over those). The reference ``Model(*init)`` is built and called on fake
    tensors: with a spec, inputs that do not fit its ``init`` are a TritonInputError naming the keys."""
    ref_path = Path(ref_path)
    data, where = read_spec(spec) if spec is not None else ({"xeforge": None}, "")
    if data["xeforge"] is not None:
        return _xeforge_harness(ref_path, data["xeforge"], small, sizes)
    if isinstance(sizes, str):
        raise InvalidArgument(f"sizes {sizes!r}: a size set's name is for an Xe-Forge spec (its ci:, bench-gpu: ... "
                              "sections); here sizes are NAME=INT module constants")
    if spec is not None:
        if sizes:
            raise InvalidArgument("sizes: with a spec the sizes are the spec's inputs and init (its small: section for a "
                                  "quick run), not module constants")
        use_small = small and data["small"] is not None
        section, prefix = (data["small"], "small.") if use_small else (data, "")
        if use_small:
            note = f"using the {where}'s small inputs (its small: section; --full for its inputs)"
        elif small:
            note = f"using the {where}'s inputs: it has no small: section"
        else:
            note = f"using the {where}'s inputs" + (" (--full)" if data["small"] is not None else "")
        mod = _import(ref_path, {})
        return _fitted(mod, ref_path, section["inputs"], section["init"], {}, note, f"the {where}'s {prefix}inputs",
                       (where, prefix))
    constants, note = kernelbench_sizes(ref_path, small=small, sizes=dict(sizes or {}))
    mod = _import(ref_path, constants)
    inputs, init = _file_inputs(mod, ref_path)
    at = ", ".join(f"{k}={v}" for k, v in constants.items()) or "its own sizes"
    return _fitted(mod, ref_path, inputs, init, constants, note, at, None)


def _xeforge_harness(ref_path: Path, spec: Any, small: bool, sizes: Mapping[str, int] | str | None) -> Harness:
    """The call from an Xe-Forge spec: the size set ``sizes`` names (else the smallest for a quick run, the
    largest with ``--full``), its inputs resolved, ``inits`` mapped onto the reference ``Model``'s constructor,
    its ``flop`` evaluated."""
    from . import xeforge  # lazy: it imports this module's helpers

    if sizes is not None and not isinstance(sizes, str):
        text = ",".join(f"{k}={v}" for k, v in sizes.items())
        raise InvalidArgument(f"sizes {text!r}: with an Xe-Forge spec, --sizes names a size set (a section such as "
                              "ci or bench-gpu, SECTION[i], or a set's name)")
    chosen, why = xeforge.select(spec, sizes, small)
    mod = _import(ref_path, {})
    model_cls = getattr(mod, "Model", None)
    if not isinstance(model_cls, type):
        raise TritonInputError(f"{ref_path}: no class Model (the PyTorch reference)")
    init = xeforge.init_args(spec, chosen, model_cls)
    dims = ", ".join(f"{k}={v}" for k, v in chosen.dims.items())
    flop = xeforge.flop_value(chosen.flop, chosen.dims) if chosen.flop is not None else None
    note = f"using the {spec.where}'s size set {chosen.key}" + (f" ({chosen.name})" if chosen.name else "") + \
        f": {dims}; {why}"
    call = _fitted(mod, ref_path, xeforge.shapes(spec, chosen), init, {}, note, f"{chosen.key} ({dims})",
                   (spec.where, f"{chosen.key}: "))
    return replace(call, flop=flop)


def _import(path: Path, constants: Mapping[str, int]) -> Any:
    """The reference module, imported under a name of its own, with ``constants`` set."""
    name = f"axon_eg_triton_input_{next(_counter)}"
    spec_ = importlib.util.spec_from_file_location(name, path)
    if spec_ is None or spec_.loader is None:
        raise TritonInputError(f"{path}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec_)
    sys.modules[name] = mod
    try:
        spec_.loader.exec_module(mod)
    except Exception as exc:  # noqa: BLE001 - the user's file failed: say so in one line
        raise TritonInputError(f"{path}: importing it raised {type(exc).__name__}: {exc}") from None
    finally:
        sys.modules.pop(name, None)
    for key, value in constants.items():
        if not hasattr(mod, key):
            raise InvalidArgument(f"sizes names {key!r}, which {path.name} does not define at module level")
        setattr(mod, key, value)
    return mod


def _inputs_and_init(source: Path, spec: dict[str, Any] | None) -> tuple[list[dict], list[Any]]:
    """The harness's input specs and the ``__init__`` arguments: from the spec (checked whole), else from
    ``source``'s ``get_inputs()`` (under a fake-tensor mode: shapes and dtypes only) and ``get_init_inputs()``."""
    if spec is not None:
        data, _ = read_spec(spec)
        return data["inputs"], data["init"]
    return _file_inputs(_import(Path(source), {}), Path(source))


def _file_inputs(mod: Any, source: Path) -> tuple[list[dict[str, Any]], list[Any]]:
    """The inputs of ``get_inputs()`` run under a fake-tensor mode (shapes and dtypes only) and the
    ``get_init_inputs()``."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from axon_eg.measure.harness import TORCH_DTYPES  # lazy: loads torch; importing triton_in.run does not

    for name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(mod, name, None)):
            raise TritonInputError(f"{source}: no {name}() (give the inputs in a spec: --spec YAML)")
    try:
        init = list(mod.get_init_inputs())
        with FakeTensorMode(allow_non_fake_inputs=True):
            example = list(mod.get_inputs())
    except Exception as exc:  # noqa: BLE001 - the user's file failed: say so in one line
        raise TritonInputError(f"{source}: running it raised {type(exc).__name__}: {exc}") from None
    inputs = []
    for i, t in enumerate(example):
        if not isinstance(t, torch.Tensor):
            raise TritonInputError(f"{source}: get_inputs() item {i} is a {type(t).__name__}, not a tensor")
        dtype = next((name for name, d in TORCH_DTYPES.items() if d == t.dtype), None)
        if dtype is None:
            raise TritonInputError(f"{source}: get_inputs() item {i} has dtype {t.dtype}, which the harness cannot make")
        inputs.append({"name": f"x{i}", "shape": list(t.shape), "dtype": dtype})
    return inputs, init


def _fitted(mod: Any, ref_path: Path, inputs: list[dict[str, Any]], init: list[Any], constants: dict[str, int],
            note: str, at: str, spec_keys: tuple[str, str] | None) -> Harness:
    """The Harness, with the reference ``Model(*init)`` built and run on fake ``inputs``. ``spec_keys`` (the
    spec's name, the key prefix): a failure is the spec's, refused naming ``init`` or ``inputs``; without a
    spec the outputs are just unknown (the worker's run tells what is wrong)."""
    import torch
    from torch._subclasses import fake_tensor as ft

    from axon_eg.ir.torch_export import _Captured, _user_frame  # lazy: loads torch; importing triton_in.run does not
    from axon_eg.measure.harness import TORCH_DTYPES  # lazy: loads torch; importing triton_in.run does not

    not_fake = tuple(getattr(ft, n) for n in ("DataDependentOutputException", "DynamicOutputShapeException",
                                             "UnsupportedOperatorException", "UnsupportedFakeTensorException")
                     if hasattr(ft, n)) + (NotImplementedError,)

    def refuse(what: str, exc: BaseException) -> TritonInputError:
        where, prefix = spec_keys  # type: ignore[misc]
        location, code = _user_frame(exc)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        line = f" at {location}" + (f" (`{code}`)" if code else "") if location else ""
        shapes = [s["shape"] for s in inputs]
        if what == "init":
            return TritonInputError(f"{where}: {prefix}init {init!r} does not fit the reference: "
                                    f"{ref_path.name}'s Model(*init){line} raised {type(exc).__name__}: {first}")
        return TritonInputError(f"{where}: {prefix}inputs (shapes {shapes}) do not fit {prefix}init {init!r}: "
                                f"{ref_path.name}'s forward(){line} raised {type(exc).__name__}: {first}")

    parameters: list[tuple[int, int]] = []
    outputs: list[tuple[list[int], int]] | None = None
    model_cls = getattr(mod, "Model", None)
    if not isinstance(model_cls, type):
        raise TritonInputError(f"{ref_path}: no class Model (the PyTorch reference)")
    fake = ft.FakeTensorMode(allow_non_fake_inputs=True)
    with _Captured(), torch.random.fork_rng(devices=[]), fake:
        try:
            model = model_cls(*init)
        except not_fake:
            model = None
        except Exception as exc:  # noqa: BLE001 - the user's Model refused these arguments
            if spec_keys is not None:
                raise refuse("init", exc) from None
            model = None
        if isinstance(model, torch.nn.Module):
            tensors = itertools.chain(model.parameters(), model.buffers())
            parameters = [(t.numel(), t.element_size()) for t in tensors]
        if model is not None:
            args = [torch.empty(s["shape"], dtype=TORCH_DTYPES[s["dtype"]]) for s in inputs]
            try:
                with torch.no_grad():
                    result = model(*args)
            except not_fake:
                result = None
            except Exception as exc:  # noqa: BLE001 - shapes that do not fit
                if spec_keys is not None and "data-dependent" not in str(exc) and "data dependent" not in str(exc):
                    raise refuse("inputs", exc) from None
                result = None
            flat = [result] if isinstance(result, torch.Tensor) else list(result) if isinstance(result, (tuple, list)) \
                else None
            if flat is not None and all(isinstance(t, torch.Tensor) for t in flat):
                outputs = [(list(t.shape), t.element_size()) for t in flat]
    return Harness(inputs, init, dict(constants), parameters, outputs, note, at)


__all__ = ["DTYPE_ALIASES", "INPUT_KEYS", "SMALL_KEYS", "SPEC_KEYS", "Harness", "check_spec", "harness", "read_spec"]
