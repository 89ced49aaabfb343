"""``Kernel``: what a backend emits for one Candidate (or baseline): a readable source file, its entry
point and calling convention, the harness input specs, and static facts for the verification cascade."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from axon_eg.errors import AxonError
from axon_eg.ir import traced
from axon_eg.ir.dtypes import DTYPES
from axon_eg.ir.inputs import index_bounds, positive_inputs
from axon_eg.ir.program import FROZEN, Program


class NotLowerable(AxonError, NotImplementedError):
    """A backend has no lowering for a group (an op, a shape, a tiling); the message names it. Triton: the
    group runs as torch code (``backends.triton.emit.lower_group`` returns the reason); NKI: the candidate
    is a ``compile_error`` row."""


@dataclass(frozen=True)
class Kernel:
    name: str  # unique within a bundle; the resume key of the measurement worker
    source: str
    entry: str = "kernel"
    mode: str = "dps"  # harness calling convention: dps (outputs passed in) or return
    kind: str = "candidate"  # candidate or baseline
    resources: dict[str, Any] = field(default_factory=dict)  # the worst launch's static resource use
    meta: dict[str, Any] = field(default_factory=dict)  # lowering per group, tilings, predicted cost


WEIGHT_ROLES = ("parameter", "buffer", FROZEN)


def weight_scale(role: str, shape: Sequence[int]) -> float:
    """The scale of a module's weight's random values, 1 / sqrt(fan-in) (every axis but the first: a linear's
    input features, a convolution's input channels times its window), as layers are initialized; 1 for data,
    vectors (a norm's gain, a bias) and scalars."""
    if role not in WEIGHT_ROLES or len(shape) < 2:
        return 1.0
    return 1.0 / math.sqrt(max(1, math.prod(shape[1:])))


def input_specs(program: Program) -> list[dict[str, Any]]:
    """The harness's input specs (name, concrete shape, dtype, positive; ``high``, the exclusive bound of an
    index input's values, ``ir.inputs.index_bounds``; ``scale`` for a module's weight, ``weight_scale``) for a
    bound program."""
    positive = positive_inputs(program)
    bounds = index_bounds(program)
    out = []
    for spec, node in zip(program.inputs, program.input_ids):
        shape = list(program.concrete_shape(node))
        scale = weight_scale(spec.role, shape) if spec.name not in positive and spec.name not in bounds else 1.0
        out.append({"name": spec.name, "shape": shape, "dtype": spec.dtype.name, "positive": spec.name in positive,
                    **({"high": bounds[spec.name]} if spec.name in bounds else {}),
                    **({"scale": scale} if scale != 1.0 else {})})
    return out


def output_dtypes(program: Program) -> list[str]:
    return [program.nodes[o].dtype.name for o in program.outputs]


def identifier(name: str, taken: set[str]) -> str:
    """A Python identifier for a program input name that collides with nothing in generated code."""
    import keyword
    import re

    ident = re.sub(r"\W", "_", name) or "x"
    if ident[0].isdigit():
        ident = "x_" + ident
    reserved = {"torch", "triton", "tl", "F", "math", "kernel", "eager", "compiled", "reference", *GUARD_NAMES}
    while keyword.iskeyword(ident) or ident in reserved or ident in taken or ident.startswith(("out", "t_", "v_", "dim_")):
        ident = "in_" + ident
    taken.add(ident)
    return ident


def shape_generic(build: Callable[[dict[str, int] | None, Any], Kernel], program: Program,
                  ranges: Mapping[str, tuple[int, int]], code: Callable[[str], str],
                  unlowerable: type[Exception] | tuple[type[Exception], ...]) -> Kernel:
    """A backend's shape-generic kernel (``ir.traced``): ``build(values, recorder)`` emits the kernel with
    the dims of ``ranges`` bound to traced ``values`` (``build(None, None)``: the static kernel). The result's
    ``meta`` says whether it is generic over ``ranges`` (``generic``; else ``generic_why``): every recorded
    guard holds at every size of the ranges (``traced.holds``, exhaustive) and the code (``code(source)``:
    the file without what states sizes, its header) written at the ranges' two ends is the code written
    at the tuned sizes, so that a size taken without a guard shows (``code_hash``: that code's hash, one per
    distinct kernel whatever sizes it was tuned at). ``unlowerable`` from the traced build
    (no generic file can be written, e.g. a dim no argument has) gives the static kernel, not generic."""
    bound = program.bindings
    for d, (lo, hi) in ranges.items():
        if d not in bound:
            raise ValueError(f"{program.name}: no bound dim named {d!r}; dims are {sorted(bound)}")
        if not 1 <= lo <= bound[d] <= hi:
            raise ValueError(f"{program.name}: the range [{lo}, {hi}] of dim {d} must hold its bound size "
                             f"{bound[d]} (and start at 1 or more)")
    sizes = {d: list(r) for d, r in sorted(ranges.items())}
    tuned = {d: bound[d] for d in ranges}
    try:
        with traced.tracing(tuned, ranges=ranges) as (values, recorder):
            kernel = build(values, recorder)
    except unlowerable as exc:
        kernel = build(None, None)
        return replace(kernel, meta={**kernel.meta, "sizes": sizes, "guards": [], "generic": False,
                                     "generic_why": str(exc)})
    generic, why = traced.holds(recorder.guards, ranges)
    for end in (0, 1):
        at = {d: r[end] for d, r in ranges.items()}
        if not generic or at == tuned:
            continue
        with traced.tracing(at, tuned=tuned, ranges=ranges) as (there, probe):
            other = build(there, probe)
        if code(other.source) != code(kernel.source):
            generic = False
            why = (f"the code written at {', '.join(f'{d}={v}' for d, v in sorted(at.items()))} differs (a size "
                   "taken without a guard)")
    return replace(kernel, meta={**kernel.meta, "sizes": sizes, "generic": generic, "generic_why": why,
                                 "guards": [f"{g.readable()} ({g.origin})" for g in recorder.guards],
                                 "code_hash": hashlib.sha256(code(kernel.source).encode()).hexdigest()[:16]})


# ------------------------------------------------------------------------------------------------
# The call-time guard: every emitted launcher and ``result.best`` check their arguments against what
# the kernel was built for (sizes, dtypes and layout are baked into the code). The functions below are
# written into each generated file as they are (``guard_source``), so they use builtins only.
# ------------------------------------------------------------------------------------------------
Signature = list[tuple[str, tuple[int, ...], str | None]]
"""(parameter name, concrete shape, dtype name or None for any) per parameter of a launcher."""


def call_signature(program: Program, names: list[str] | None = None, *, outputs: bool = True) -> Signature:
    """(parameter name, shape, dtype name) of each input (``names``: the launcher's parameter names, default
    the program's input names), then of each output ``out0, out1, ...``. A shape holds ints, and where the
    program's dims are traced (``ir.traced``, a shape-generic kernel) their expressions as text (``"M"``)."""
    sig = [(name, _spelled(program.concrete_shape(node)), spec.dtype.name)
           for name, spec, node in zip(names or [s.name for s in program.inputs], program.inputs, program.input_ids)]
    if outputs:
        sig += [(f"out{k}", _spelled(program.concrete_shape(o)), program.nodes[o].dtype.name)
                for k, o in enumerate(program.outputs)]
    return sig


def _spelled(shape: tuple[int, ...]) -> tuple[int | str, ...]:
    """A shape with each traced size as its expression over the dims' names (``ir.traced``)."""
    return tuple(str(d.sym) if isinstance(d, traced.Traced) else int(d) for d in shape)


def described(shape: tuple | None, dtype: object) -> str:
    """``bf16[8, 16]``: a dtype (torch or NumPy; None for any: ``[8, 16]``) and a shape (None: the dtype
    alone), as the messages write them."""
    text = "" if dtype is None else str(dtype).removeprefix("torch.")
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}.get(text, text)
    return short if shape is None else f"{short}[{', '.join(str(d) for d in shape)}]"


def check_call(args: tuple, extra: tuple, signature: tuple, who: str, error: type, tensor: type,
               layout: bool = True, ranges: dict | None = None) -> dict:
    """Raise ``error`` naming the first argument that does not fit ``signature`` ((name, shape, dtype or
    None) per parameter): a missing or extra argument, not a ``tensor``, another shape or dtype, and with
    ``layout`` a tensor that is not contiguous row-major or not on the first one's device. A shape entry that
    is a name (``"M"``) takes its size from the first argument that has it and must agree with it in the
    others; an expression of names (``"2*M"``) must equal its value; ``ranges`` bounds the names
    (inclusive). Returns the size of each name. It runs first thing in every launch, so the usual call
    (every argument as built) takes a few compares per argument here; anything else, and expressions, go
    through ``explain_call``, which finds the problem and words it."""
    if not extra and len(args) == len(signature):
        dims: dict = {}
        device = None
        for (_, shape, dtype), a in zip(signature, args):
            if not isinstance(a, tensor) or (dtype is not None and a.dtype != dtype):
                break
            got = a.shape
            if got != shape and (len(got) != len(shape) or not all(
                    g == w or (w.__class__ is str and w.isidentifier() and dims.setdefault(w, g) == g)
                    for g, w in zip(got, shape))):
                break
            if layout:
                if device is None:
                    device = a.device
                    if device.type == "meta":
                        break
                elif a.device != device:
                    break
                if not a.is_contiguous():
                    break
        else:
            if not ranges or all(d in dims and lo <= dims[d] <= hi for d, (lo, hi) in ranges.items()):
                return dims
    return explain_call(args, extra, signature, who, error, tensor, layout, ranges)


def explain_call(args: tuple, extra: tuple, signature: tuple, who: str, error: type, tensor: type,
                 layout: bool = True, ranges: dict | None = None) -> dict:
    """``check_call``'s thorough path: raise ``error`` naming the first argument that does not fit (see
    there), or return the size of each name (expressions of names checked too)."""
    if extra or len(args) > len(signature):
        given = len(args) + len(extra)
        raise error(f"{who}: {given} arguments given, this kernel takes {len(signature)} "
                    f"({', '.join(s[0] for s in signature)})")
    first = None
    dims: dict = {}
    seen: dict = {}
    later = []
    for k, (name, shape, dtype) in enumerate(signature):
        a = args[k] if k < len(args) else None
        if a is None:
            raise error(f"{who}: missing argument {name} (expected {described(shape, dtype)})")
        if not isinstance(a, tensor):
            raise error(f"{who}: argument {name} is a {type(a).__name__}, expected a {tensor.__module__.split('.')[0]} "
                        f"{tensor.__name__} {described(shape, dtype)}")
        if a.shape != shape:
            if len(a.shape) != len(shape) or not all(isinstance(w, str) or g == w for g, w in zip(a.shape, shape)):
                raise error(f"{who}: argument {name} has shape {tuple(a.shape)}, this kernel was built for "
                            f"{described(shape, None) if any(isinstance(w, str) for w in shape) else shape}")
            for axis, (got, want) in enumerate(zip(a.shape, shape)):
                if not isinstance(want, str):
                    continue
                if not want.isidentifier():
                    later.append((name, axis, got, want))
                elif want in dims and dims[want] != got:
                    raise error(f"{who}: argument {name} has {want} = {got} (axis {axis}), argument {seen[want]} "
                                f"has {want} = {dims[want]}; they must agree")
                else:
                    dims[want], seen[want] = got, seen.get(want, name)
        if dtype is not None and a.dtype != dtype:
            raise error(f"{who}: argument {name} has dtype {described(None, a.dtype)}, this kernel was built for "
                        f"{described(shape, dtype)}")
        if not layout:
            continue
        if first is None:
            first = (name, a.device)
            if a.device.type == "meta":
                raise error(f"{who}: argument {name} is on the meta device, which holds no data")
        elif a.device != first[1]:
            raise error(f"{who}: argument {name} is on {a.device}, argument {first[0]} on {first[1]}: this kernel "
                        "takes all its tensors on one device")
        if not a.is_contiguous():
            raise error(f"{who}: argument {name} is not contiguous (strides {tuple(a.stride())}); this kernel was "
                        f"built for contiguous row-major {described(shape, dtype)} (pass {name}.contiguous())")
    for name, axis, got, want in later:
        try:
            value = eval(want, {"__builtins__": {}}, dims)  # an expression of the names the arguments gave
        except NameError as exc:
            raise error(f"{who}: argument {name} has {want} at axis {axis}, and no argument gives "
                        f"{exc.name}") from None
        if got != value:
            raise error(f"{who}: argument {name} has {got} at axis {axis}, this kernel needs {want} = {value} there")
    for dim, (lo, hi) in (ranges or {}).items():
        if dim not in dims:
            raise error(f"{who}: no argument gives {dim}, which this kernel takes at run time")
        if not lo <= dims[dim] <= hi:
            raise error(f"{who}: {dim} = {dims[dim]} is outside [{lo}, {hi}], the sizes this kernel was built for")
    return dims


GUARD_NAMES = ("KernelCallError", "described", "check_call", "explain_call", "SIGNATURE", "SIZES")
"""The globals ``guard_source`` defines in a generated file (no parameter may take these names)."""
GUARD_CLASS = '''class KernelCallError(ValueError):
    """A call whose arguments do not fit what this kernel was built for (sizes, dtypes and layout are fixed)."""
'''


def guard_source(signature: Signature, torch_dtypes: bool = True, ranges: dict | None = None) -> str:
    """The guard as generated code: ``KernelCallError``, ``described``, ``check_call``, ``explain_call`` and
    ``SIGNATURE`` (the parameters with their shapes and torch dtypes; a None dtype accepts any), for a file
    importing torch;
    with ``ranges`` (a shape-generic kernel: its run-time dims' inclusive ranges) also ``SIZES``."""
    import inspect

    rows = "".join(f"    ({name!r}, {tuple(shape)!r}, {f'torch.{DTYPES[dt].torch_name}' if dt and torch_dtypes else None}),\n"
                   for name, shape, dt in signature)
    sizes = ("\n# the run-time dims and the sizes this kernel was built for (inclusive)\nSIZES = "
             + repr({k: tuple(v) for k, v in sorted(ranges.items())}) + "\n") if ranges else ""
    return (GUARD_CLASS + "\n\n" + inspect.getsource(described) + "\n\n" + inspect.getsource(check_call)
            + "\n\n" + inspect.getsource(explain_call)
            + "\n\n# what the launcher was built for: (parameter, shape, dtype)\nSIGNATURE = (\n" + rows + ")\n"
            + sizes)
