"""Lower registry ops and whole Programs to PyTorch source code.

``LOWERINGS`` maps every registry op name to a function that writes one Python expression over its
arguments' expressions, as a user would write it (``torch.exp(x)``, ``F.silu(x)``, ``a @ b``,
``F.scaled_dot_product_attention(q, k, v, enable_gqa=True)``). Composites lower to the ``F.*`` call
when its semantics equal the registry reference for the shapes at hand, and to their expansion
otherwise. ``emit_function`` writes one function per Program; ``emit_module`` a complete module with
the eager baseline, a lazily built ``torch.compile`` baseline and a float64 reference. The emitted
code imports only ``torch`` and ``torch.nn.functional as F``; this module itself does not need torch.

Precision: each expression computes in its inputs' dtype as torch does (bf16 in, bf16 out); where
the registry's dtype rule promotes (``add(bf16, fp32)`` is fp32), operands are cast to the output
dtype first, so every emitted value has its node's dtype. With ``compute_dtype`` (the float64
reference) every dtype, casts included, becomes that dtype.

Modules: this one writes whole functions and modules (``expr``, ``emit_function``, ``emit_module``); the
per-op expressions are in :mod:`axon_eg.backends.torch.expressions` (the registry, formatting, element-wise,
reductions, layout) and :mod:`axon_eg.backends.torch.composite_expressions` (composites, library ops), imported
here so that ``LOWERINGS`` is whole; import each name from its own module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from axon_eg.backends.kernel import call_signature, guard_source
from axon_eg.backends.torch import composite_expressions  # noqa: F401 - registers the composite and library lowerings
from axon_eg.backends.torch.expressions import LOWERINGS, atom, identifier, is_literal, literal, torch_dtype
from axon_eg.errors import ProgramError, UnknownOperation
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.dtypes import DType, as_dtype
from axon_eg.ir.program import Node, Program


# --------------------------------------------------------------------------------------------
# Nodes, functions, modules
# --------------------------------------------------------------------------------------------
def _bind(value: Any, bindings: Mapping[str, int]) -> Any:
    if isinstance(value, D.Sym):
        return D.evaluate(value, bindings)
    if isinstance(value, tuple):
        return tuple(_bind(v, bindings) for v in value)
    return value


def _check_bound(program: Program) -> None:
    unbound = sorted(program.free_dims - set(program.bindings))
    if unbound:
        raise ProgramError(f"{program.name}: dims {unbound} are not bound; lower program.bind(...) instead")


def _compute(compute_dtype: Any) -> DType | None:
    return None if compute_dtype is None else as_dtype(compute_dtype)


def expr(program: Program, i: int, args: Sequence[str], *, compute_dtype: Any = None) -> str:
    """The PyTorch expression of node ``i`` over its operands' expressions ``args``.

    Each argument must evaluate to a tensor of its operand node's dtype (or of ``compute_dtype``), or
    be a Python number standing for a scalar constant. Operands whose dtype differs from the node's
    (the registry promotes) are cast to it first; with ``compute_dtype`` nothing is cast."""
    compute = _compute(compute_dtype)
    casts = _operand_casts(program, i, compute)
    node = program.nodes[i]
    args = [f"{atom(arg)}.to({torch_dtype(node.dtype)})" if j in casts and not is_literal(arg) else arg
            for arg, j in zip(args, node.inputs)]
    return _lower(program, i, args, compute)


def _operand_casts(program: Program, i: int, compute: DType | None) -> set[int]:
    """Operands of node ``i`` to cast to its dtype before the op (none when computing in one dtype)."""
    node = program.nodes[i]
    meta = O.get(node.op).meta
    if compute is not None or node.op == "cast" or meta.get("logical") or meta.get("indices"):
        return set()  # comparisons, where, argmax and gathers take their operands as they are
    return {j for j in node.inputs if program.nodes[j].dtype != node.dtype}


def _constant_literal(node: Node) -> str:
    """A constant node's Python number: an int for an integer or boolean constant (bit operations refuse
    floats), else a float literal."""
    number = node.attrs["value"]
    exact = node.dtype.kind != "float" and math.isfinite(number) and number == int(number)
    return str(int(number)) if exact else literal(number)


def _lower(program: Program, i: int, args: list[str], compute: DType | None) -> str:
    """Node ``i``'s expression over operands already in its dtype."""
    node = program.nodes[i]
    if node.is_constant and compute is None:
        return _constant_literal(node)
    lower = LOWERINGS.get(node.op)
    if lower is None:
        raise UnknownOperation(f"{node.op}: no PyTorch lowering; add one to axon_eg.backends.torch.lower.LOWERINGS")
    bindings = program.bindings
    attrs = O.Attrs(tuple((k, _bind(v, bindings)) for k, v in node.attrs.items()))
    if node.op == "cast":
        if compute is not None and not node.dtype.is_float:  # computing in one float dtype: the cast's value
            test = f"({atom(args[0])} != 0)" if node.dtype.kind == "bool" else f"torch.trunc({args[0]})"
            return f"{test}.to({torch_dtype(compute)})" if node.dtype.kind == "bool" else test
        source, target = (compute or d for d in (program.nodes[node.inputs[0]].dtype, node.dtype))
        if source == target:
            return args[0]
        attrs = attrs.replace(dtype=target)
    in_shapes = [program.concrete_shape(j) for j in node.inputs]
    if compute is not None and O.get(node.op).dtype is O.bitwise:  # bits of the integer values, back to floats
        args = [a if is_literal(a) else f"{atom(a)}.long()" for a in args]
        return f"({lower(args, attrs, in_shapes, program.concrete_shape(i), bindings)}).to({torch_dtype(compute)})"
    return lower(args, attrs, in_shapes, program.concrete_shape(i), bindings)


def input_names(program: Program) -> dict[int, str]:
    """Node id -> the Python parameter name of each input (sanitized, unique)."""
    taken: set[str] = set()
    out: dict[int, str] = {}
    for i in program.input_ids:
        base = text = identifier(program.nodes[i].attrs["name"])
        suffix = 1
        while text in taken:
            text, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(text)
        out[i] = text
    return out


def _scalar_operand(program: Program, user: int, constant: int) -> bool:
    """Whether ``constant`` can be a Python number in ``user``: a binary element-wise op whose other
    operand is a tensor (torch then computes in the tensor's dtype, as a weak scalar)."""
    node = program.nodes[user]
    op = O.get(node.op)
    others = [j for j in node.inputs if j != constant]
    binary = op.kind is O.OpKind.ELEMENTWISE and op.meta.get("arity") == 2
    return binary and len(others) == 1 and not program.nodes[others[0]].is_constant


def emit_function(program: Program, name: str = "forward", *, compute_dtype: Any = None) -> str:
    """Source of ``def name(<inputs>)``: one assignment per node, returning the output (a tuple when
    there are several), each returned tensor contiguous."""
    _check_bound(program)
    compute = _compute(compute_dtype)
    params = input_names(program)
    device = f"{params[program.input_ids[0]]}.device" if program.input_ids else None
    users, outputs = program.users(), set(program.outputs)
    refs = [""] * len(program.nodes)
    scalars: dict[int, str] = {}  # constant node -> its literal, for the binary ops that take it as a number
    casts: dict[tuple[int, DType], str] = {}  # (node, dtype) -> the variable holding the node cast to dtype
    taken = set(params.values())
    strided = [False] * len(program.nodes)  # may be a view or follow a view's strides
    body = []

    def cast(j: int, dtype: DType) -> str:
        if (j, dtype) not in casts:
            var = f"{refs[j]}_{dtype.name}"
            while var in taken:
                var += "_"
            taken.add(var)
            casts[j, dtype] = var
            body.append(f"    {var} = {refs[j]}.to({torch_dtype(dtype)})")
        return casts[j, dtype]

    for i, node in enumerate(program.nodes):
        if node.is_input:
            refs[i] = params[i]
            continue
        if node.is_constant:
            value = scalars[i] = _constant_literal(node)
            if i not in outputs and all(_scalar_operand(program, u, i) for u in users[i]):
                continue
            where = f", device={device}" if device else ""
            rhs = f"torch.tensor({value}, dtype={torch_dtype(compute or node.dtype)}{where})"
        else:
            to_cast = _operand_casts(program, i, compute)
            args = [scalars[j] if j in scalars and _scalar_operand(program, i, j)
                    else cast(j, node.dtype) if j in to_cast else refs[j] for j in node.inputs]
            rhs = _lower(program, i, args, compute)
            strided[i] = O.get(node.op).kind is O.OpKind.LAYOUT or any(strided[j] for j in node.inputs)
        refs[i] = f"v{i}"
        body.append(f"    v{i} = {rhs}")
    returned = [refs[o] + (".contiguous()" if strided[o] else "") for o in program.outputs]
    body.append(f"    return {', '.join(returned)}")
    return f"def {name}({', '.join(params.values())}):\n" + "\n".join(body) + "\n"


_MODULE_TAIL = '''

def eager(*inputs):
    """The PyTorch baseline: the program in its inputs' dtypes (one tensor, or a tuple), at the sizes it was
    built for (SIGNATURE: a call with other sizes raises KernelCallError naming the argument)."""
    check_call(inputs, (), SIGNATURE, "eager", KernelCallError, torch.Tensor, False)
    return forward(*inputs)


_compiled = None


def compiled(*inputs):
    """torch.compile(forward, mode="max-autotune-no-cudagraphs"), compiled on the first call."""
    global _compiled
    check_call(inputs, (), SIGNATURE, "compiled", KernelCallError, torch.Tensor, False)
    if _compiled is None:
        _compiled = torch.compile(forward, mode="max-autotune-no-cudagraphs")
    return _compiled(*inputs)


_compiled_default = None


def compiled_default(*inputs):
    """torch.compile(forward) in its default mode (KernelBench's bar), compiled on the first call."""
    global _compiled_default
    check_call(inputs, (), SIGNATURE, "compiled_default", KernelCallError, torch.Tensor, False)
    if _compiled_default is None:
        _compiled_default = torch.compile(forward)
    return _compiled_default(*inputs)


def reference(*arrays):
    """The program in float64: NumPy arrays in (program input order), NumPy float64 arrays out."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tensors = [torch.as_tensor(a, dtype=torch.float64, device=device) for a in arrays]
    with torch.no_grad():
        out = forward_float64(*tensors)
    if isinstance(out, tuple):
        return tuple(t.cpu().numpy() for t in out)
    return out.cpu().numpy()


def reference_torch(*tensors):
    """The program in float64 on the tensors' device: torch tensors in and out (the harness's fast path
    for large programs, nothing leaves the GPU)."""
    with torch.no_grad():
        return forward_float64(*(t.to(torch.float64) for t in tensors))


reference_torch._takes_torch = True
'''


def emit_module(program: Program) -> str:
    """A complete module: ``eager(*inputs)``, ``compiled(*inputs)`` and ``reference(*arrays)``. ``eager`` and
    ``compiled`` first check the number and the shapes of their arguments (the code bakes the sizes in; any
    dtype and layout is fine, torch handles them) with the guard of :mod:`axon_eg.backends.kernel`."""
    _check_bound(program)
    header = [
        f"# Program {program.name!r}, hash {program.hash}, lowered to PyTorch by axon_eg.backends.torch.",
        "#   eager: the baseline in the inputs' dtypes; compiled: torch.compile of it (built on first call);",
        "#   reference: the same code in float64 (CUDA when available), NumPy arrays in and out.",
        "#",
        *(f"# {line}" for line in str(program).splitlines()),
        "import torch",
        "import torch.nn.functional as F",
        "",
        f"INPUTS = {tuple(spec.name for spec in program.inputs)!r}",
        "",
        "",
        guard_source([(name, shape, None) for name, shape, _ in
                      call_signature(program, list(input_names(program).values()), outputs=False)]),
        "",
        "",
    ]
    forward = emit_function(program, "forward")
    forward64 = emit_function(program, "forward_float64", compute_dtype="float64")
    return "\n".join(header) + forward + "\n\n" + forward64 + _MODULE_TAIL


__all__ = ["emit_function", "emit_module", "expr", "input_names"]
