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
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from axon_eg.backends.kernel import call_signature, guard_source
from axon_eg.errors import ProgramError, UnknownOperation
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.dtypes import DType, as_dtype
from axon_eg.ir.program import Program

Shape = tuple[int, ...]
Lowering = Callable[[list[str], O.Attrs, list[Shape], Shape, Mapping[str, int]], str]

LOWERINGS: dict[str, Lowering] = {}


def lowers(*names: str) -> Callable[[Lowering], Lowering]:
    """Decorator: register the decorated function as the lowering of the named ops."""

    def wrap(fn: Lowering) -> Lowering:
        for name in names:
            if name in LOWERINGS:
                raise ValueError(f"op {name!r} lowered twice")
            LOWERINGS[name] = fn
        return fn

    return wrap


def missing_lowerings() -> list[str]:
    """Registry ops without a PyTorch lowering (a test keeps this empty)."""
    return [name for name in O.REGISTRY if name not in LOWERINGS]


# --------------------------------------------------------------------------------------------
# Formatting helpers
# --------------------------------------------------------------------------------------------
def literal(value: float) -> str:
    """A Python float literal; infinities as ``float('inf')``."""
    return repr(float(value)) if math.isfinite(value) else f"float('{'inf' if value > 0 else '-inf'}')"


def is_literal(text: str) -> bool:
    """Whether an argument expression is a Python number (a weak scalar to torch), not a tensor."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float":
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float))


def atom(text: str) -> str:
    """``text`` parenthesized unless it already binds tighter than any operator."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    simple = isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Subscript))
    return text if simple or (isinstance(node, ast.Constant) and not text.startswith("-")) else f"({text})"


def ints(values: Sequence[int]) -> str:
    return f"({values[0]},)" if len(values) == 1 else f"({', '.join(str(v) for v in values)})"


def _axis(axis: int, rank: int) -> str:
    return "-1" if axis == rank - 1 and rank > 1 else str(axis)


def _dims(axes: Sequence[int], rank: int) -> str:
    return _axis(axes[0], rank) if len(axes) == 1 else ints(axes)


def _kwargs(pairs: Sequence[tuple[str, Any, Any]]) -> str:
    """``, k=v`` for each (name, value, default) whose value is not the default."""
    return "".join(f", {k}={v}" for k, v, default in pairs if v != default)


def _quoted(text: str) -> str:
    return '"' + text + '"'


def torch_dtype(dtype: DType) -> str:
    return f"torch.{dtype.torch_name}"


# --------------------------------------------------------------------------------------------
# Sources and element-wise ops
# --------------------------------------------------------------------------------------------
def identifier(name: str) -> str:
    """A Python identifier for an input name (``fc.weight`` -> ``fc_weight``); callers dedupe."""
    text = re.sub(r"\W", "_", name) or "_"
    if text[0].isdigit():
        text = "_" + text
    if keyword.iskeyword(text) or text in _RESERVED or re.fullmatch(r"v\d+", text):
        text += "_"
    return text


_RESERVED = {"torch", "F", "math", "float", "forward", "forward_float64", "eager", "compiled", "reference"}


@lowers("input")
def _input(args, a, ins, out, b):
    return identifier(a["name"])


@lowers("constant")
def _constant(args, a, ins, out, b):
    return literal(a["value"])


_UNARY_CALLS = {
    "exp": "torch.exp", "log": "torch.log", "sqrt": "torch.sqrt", "rsqrt": "torch.rsqrt",
    "reciprocal": "torch.reciprocal", "abs": "torch.abs", "square": "torch.square", "relu": "torch.relu",
    "sigmoid": "torch.sigmoid", "tanh": "torch.tanh", "erf": "torch.erf", "silu": "F.silu", "mish": "F.mish",
    "hardswish": "F.hardswish", "hardsigmoid": "F.hardsigmoid",
}


def _call(fn: str) -> Lowering:
    return lambda args, a, ins, out, b: f"{fn}({args[0]})"


for _name, _fn in _UNARY_CALLS.items():
    lowers(_name)(_call(_fn))


@lowers("neg")
def _neg(args, a, ins, out, b):
    return f"-{atom(args[0])}"


@lowers("leaky_relu")
def _leaky_relu(args, a, ins, out, b):
    return f"F.leaky_relu({args[0]}{_kwargs([('negative_slope', a['slope'], 0.01)])})"


@lowers("gelu")
def _gelu(args, a, ins, out, b):
    return f"F.gelu({args[0]}{_kwargs([('approximate', _quoted(a['approximate']), _quoted('none'))])})"


@lowers("softplus")
def _softplus(args, a, ins, out, b):
    return f"F.softplus({args[0]}{_kwargs([('beta', a['beta'], 1.0), ('threshold', a['threshold'], 20.0)])})"


@lowers("clamp")
def _clamp(args, a, ins, out, b):
    bounds = [f"{k}={literal(v)}" for k, v in (("min", a["lo"]), ("max", a["hi"])) if math.isfinite(v)]
    return f"torch.clamp({args[0]}, {', '.join(bounds)})" if bounds else f"{atom(args[0])}.clone()"


@lowers("pow")
def _pow(args, a, ins, out, b):
    return f"torch.pow({args[0]}, {literal(a['exponent'])})"


@lowers("cast")
def _cast(args, a, ins, out, b):
    return f"{atom(args[0])}.to({torch_dtype(a['dtype'])})"


def _triangle(rows: int, cols: int, like: str, part: str) -> str:
    """A bool [rows, cols] tensor: ``triu(k)`` or ``tril(k)`` of ones, on ``like``'s device."""
    return f"torch.ones({rows}, {cols}, dtype=torch.bool, device={atom(like)}.device).{part}"


@lowers("causal_mask")
def _causal_mask(args, a, ins, out, b):
    rows, cols = ins[0][-2:]
    above = _triangle(rows, cols, args[0], f"triu({a['diagonal'] + 1})")
    return f"{atom(args[0])}.masked_fill({above}, {literal(a['fill'])})"


_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _operator(symbol: str) -> Lowering:
    return lambda args, a, ins, out, b: f"{atom(args[0])} {symbol} {atom(args[1])}"


for _name, _symbol in _OPERATORS.items():
    lowers(_name)(_operator(_symbol))


def _extremum(fn: str, bound: str) -> Lowering:
    def lower(args, a, ins, out, b):
        x, y = args
        if is_literal(y) or is_literal(x):  # torch.maximum takes tensors only
            tensor, scalar = (y, x) if is_literal(x) else (x, y)
            return f"torch.clamp({tensor}, {bound}={scalar})"
        return f"{fn}({x}, {y})"

    return lower


lowers("maximum")(_extremum("torch.maximum", "min"))
lowers("minimum")(_extremum("torch.minimum", "max"))


# --------------------------------------------------------------------------------------------
# Reductions, scans, contraction
# --------------------------------------------------------------------------------------------
def _reduction(fn: str) -> Lowering:
    def lower(args, a, ins, out, b):
        rank, axes = len(ins[0]), a["axes"]
        if not axes:  # a 0-d input: reducing over no axes is the identity
            return args[0]
        if len(axes) == rank and not a["keepdims"] and fn != "torch.logsumexp":
            return f"{fn}({args[0]})"
        return f"{fn}({args[0]}, dim={_dims(axes, rank)}{', keepdim=True' if a['keepdims'] else ''})"

    return lower


for _name, _fn in {"sum": "torch.sum", "mean": "torch.mean", "max": "torch.amax", "min": "torch.amin",
                   "logsumexp": "torch.logsumexp"}.items():
    lowers(_name)(_reduction(_fn))


@lowers("cumsum")
def _cumsum(args, a, ins, out, b):
    return f"torch.cumsum({args[0]}, dim={_axis(a['axis'], len(ins[0]))})"


@lowers("matmul")
def _matmul(args, a, ins, out, b):
    return f"{atom(args[0])} @ {atom(args[1])}"


# --------------------------------------------------------------------------------------------
# Layout (views; emit_function makes returned outputs contiguous)
# --------------------------------------------------------------------------------------------
@lowers("transpose")
def _transpose(args, a, ins, out, b):
    perm, x = a["perm"], atom(args[0])
    rank, moved = len(perm), [i for i, p in enumerate(perm) if i != p]
    if not moved:
        return args[0]
    if len(moved) > 2:
        return f"{x}.permute{ints(perm)}"
    if rank == 2:
        return f"{x}.T"
    i, j = moved  # a permutation moving two axes swaps them
    return f"{x}.transpose(-2, -1)" if (i, j) == (rank - 2, rank - 1) else f"{x}.transpose({i}, {j})"


@lowers("reshape")
def _reshape(args, a, ins, out, b):
    return f"{atom(args[0])}.reshape{ints(out) if out else '(())'}"


@lowers("broadcast_to")
def _broadcast_to(args, a, ins, out, b):
    return args[0] if tuple(ins[0]) == tuple(out) else f"{atom(args[0])}.expand{ints(out) if out else '(())'}"


@lowers("expand_dims")
def _expand_dims(args, a, ins, out, b):
    return f"{atom(args[0])}.unsqueeze({a['axis']})"


@lowers("squeeze")
def _squeeze(args, a, ins, out, b):
    axes = a["axes"]
    return f"{atom(args[0])}.squeeze({_dims(axes, len(ins[0])) if len(axes) == 1 else ints(axes)})" if axes else args[0]


@lowers("slice")
def _slice(args, a, ins, out, b):
    rank, axis, size = len(ins[0]), a["axis"], ins[0][a["axis"]]
    start, stop = D.evaluate(a["start"], b), D.evaluate(a["stop"], b)
    part = (f"{start}" if start else "") + ":" + (f"{stop}" if stop < size else "")
    part += f":{a['step']}" if a["step"] != 1 else ""
    index = ["..."] if axis == rank - 1 and rank > 1 else [":"] * axis
    return f"{atom(args[0])}[{', '.join([*index, part])}]"


@lowers("concat")
def _concat(args, a, ins, out, b):
    return f"torch.cat([{', '.join(args)}], dim={_axis(a['axis'], len(ins[0]))})"


# --------------------------------------------------------------------------------------------
# Composites: the F.* call where its semantics are the registry's, else the expansion
# --------------------------------------------------------------------------------------------
@lowers("linear")
def _linear(args, a, ins, out, b):
    x, w, *bias = args
    if bias and tuple(ins[2]) != (ins[1][0],):  # F.linear wants a [out_features] bias
        return f"F.linear({x}, {w}) + {atom(bias[0])}"
    return f"F.linear({', '.join(args)})"


def _softmax(fn: str) -> Lowering:
    return lambda args, a, ins, out, b: f"{fn}({args[0]}, dim={_axis(a['axis'], len(ins[0]))})"


lowers("softmax")(_softmax("torch.softmax"))
lowers("log_softmax")(_softmax("torch.log_softmax"))


def _norm(fn: str, extra: str, args: list[str], ins: list[Shape], normalized: Shape, eps: float,
          names: tuple[str, ...]) -> str:
    """``fn(x, <extra>, weight, bias, eps)`` with each affine operand shaped ``normalized`` passed in;
    an operand of another (broadcast) shape is applied after, in the registry's order (weight, bias)."""
    given = dict(zip(names, zip(args[1:], ins[1:])))
    inside: list[str] = []
    after = ""
    for name in names:
        if name not in given:
            continue
        arg, shape = given[name]
        if tuple(shape) == tuple(normalized) and not after:
            inside.append(f"{name}={arg}")
        else:
            after += f" {'*' if name == 'weight' else '+'} {atom(arg)}"
    call = f"{fn}({', '.join([args[0], *([extra] if extra else []), *inside, f'eps={literal(eps)}'])})"
    return call + after


@lowers("layernorm")
def _layernorm(args, a, ins, out, b):
    normalized = tuple(ins[0][ax] for ax in a["axes"])
    return _norm("F.layer_norm", ints(normalized), args, ins, normalized, a["eps"], ("weight", "bias"))


@lowers("rmsnorm")
def _rmsnorm(args, a, ins, out, b):
    normalized = tuple(ins[0][ax] for ax in a["axes"])
    return _norm("F.rms_norm", ints(normalized), args, ins, normalized, a["eps"], ("weight",))


def _channel(arg: str, shape: Shape, rank: int, axis: int) -> str:
    """A per-channel vector viewed to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return f"{atom(arg)}.reshape{ints((shape[0],) + (1,) * (rank - axis - 1))}" if rank - axis > 1 else arg


@lowers("groupnorm")
def _groupnorm(args, a, ins, out, b):
    (n, channels, *spatial), groups = ins[0], a["groups"]
    rank, eps = len(ins[0]), literal(a["eps"])
    per_group = channels // groups * math.prod(spatial)
    if n * per_group == 1:  # F.group_norm refuses one value per channel group (a batch-size check)
        y = f"F.layer_norm({atom(args[0])}.reshape({n}, {groups}, {per_group}), ({per_group},), eps={eps})"
        y = f"{y}.reshape{ints(ins[0])}"
    elif all(tuple(shape) == (channels,) for shape in ins[1:]):
        return _norm("F.group_norm", str(groups), args, ins, (channels,), a["eps"], ("weight", "bias"))
    else:
        y = f"F.group_norm({args[0]}, {groups}, eps={eps})"
    # affine operands of other shapes (and the fallback) apply after, viewed as [C, 1, ...]
    return y + "".join(f" {op} {atom(_channel(arg, shape, rank, 1))}" for op, arg, shape in zip("*+", args[1:], ins[1:]))


@lowers("batchnorm")
def _batchnorm(args, a, ins, out, b):
    x, mean, var, *affine = args
    rank, axis = len(ins[0]), a["axis"]
    if axis == 1 and rank >= 2:  # torch's channel axis
        named = [f"{k}={v}" for k, v in zip(("weight", "bias"), affine)]
        eps = f"eps={literal(a['eps'])}"
        return f"F.batch_norm({', '.join([x, mean, var, *named, 'training=False', eps])})"
    m, v, *wb = (_channel(arg, shape, rank, axis) for arg, shape in zip(args[1:], ins[1:]))
    y = f"({atom(x)} - {atom(m)}) * torch.rsqrt({atom(v)} + {literal(a['eps'])})"
    return y + "".join(f" {op} {atom(t)}" for op, t in zip("*+", wb))


@lowers("dropout")
def _dropout(args, a, ins, out, b):
    return f"F.dropout({args[0]}, p={literal(a['p'])}, training=False)"


@lowers("rope")
def _rope(args, a, ins, out, b):
    x, cos, sin = (atom(arg) for arg in args)
    half = ins[0][-1] // 2
    return f"{x} * {cos} + torch.cat([-{x}[..., {half}:], {x}[..., :{half}]], dim=-1) * {sin}"


def _sdpa_native(ins: list[Shape], out: Shape) -> bool:
    """Whether F.scaled_dot_product_attention computes exactly the registry's sdpa for these shapes:
    same batch dims, k/v heads dividing q heads (enable_gqa) and a mask that does not add axes."""
    q, k, v = ins[:3]
    lead = 3 if len(q) >= 3 else 2
    if not (q[:-lead] == k[:-lead] == v[:-lead] and k[:-1] == v[:-1]):
        return False
    if lead == 3 and q[-3] % k[-3]:
        return False
    if len(ins) == 4:
        scores = (*q[:-1], k[-2])
        mask = ins[3]
        if len(mask) > len(scores) or any(m not in (1, s) for m, s in zip(mask[::-1], scores[::-1])):
            return False
    return tuple(out) == (*q[:-1], v[-1])


@lowers("sdpa")
def _sdpa(args, a, ins, out, b):
    q, k, v, *mask = args
    rows, cols = ins[0][-2], ins[1][-2]
    scale = a["scale"]
    if _sdpa_native(ins, out):
        extra = []
        if mask:
            m = mask[0]
            if len(ins[3]) < 2:  # torch's CPU kernel wants a mask of rank >= 2
                m = f"{atom(m)}.reshape{ints((1,) * (2 - len(ins[3])) + tuple(ins[3]))}"
            if a["causal"]:  # torch takes attn_mask or is_causal, not both: fold the triangle into the mask
                m = f"torch.where({_triangle(rows, cols, m, 'tril()')}, {m}, float('-inf'))"
            extra.append(f"attn_mask={m}")
        elif a["causal"]:
            extra.append("is_causal=True")
        if scale is not None:
            extra.append(f"scale={literal(scale)}")
        if len(ins[0]) >= 3 and ins[0][-3] != ins[1][-3]:
            extra.append("enable_gqa=True")
        return f"F.scaled_dot_product_attention({', '.join([q, k, v, *extra])})"
    # the expansion: grouped heads by repeat_interleave, as the registry's reference does
    if len(ins[0]) >= 3 and ins[0][-3] != ins[1][-3]:
        group = ins[0][-3] // ins[1][-3]
        k, v = (f"{atom(t)}.repeat_interleave({group}, dim=-3)" for t in (k, v))
    if scale is None:
        scale = 1.0 / math.sqrt(ins[0][-1])
    scores = f"{atom(q)} @ {atom(k)}.transpose(-2, -1) * {literal(scale)}"
    if mask:
        scores += f" + {atom(mask[0])}"
    if a["causal"]:
        scores = f"({scores}).masked_fill({_triangle(rows, cols, q, 'triu(1)')}, float('-inf'))"
    return f"torch.softmax({scores}, dim=-1) @ {atom(v)}"


# --------------------------------------------------------------------------------------------
# Library ops: the torch.nn.functional call of the same name (as the registry's reference)
# --------------------------------------------------------------------------------------------
def _spatial(values: tuple[int, ...]) -> str:
    return str(values[0]) if len(set(values)) == 1 else ints(values)


def _library(name: str) -> Lowering:
    def lower(args, a, ins, out, b):
        n = O.get(name).meta["spatial"]
        defaults = {"stride": (1,) * n, "padding": (0,) * n, "dilation": (1,) * n, "output_padding": (0,) * n,
                    "groups": 1, "ceil_mode": False, "count_include_pad": True}
        if "kernel_size" in a:
            defaults["stride"] = a["kernel_size"]
        pieces = list(args)
        for key, value in a.items():
            text = _spatial(value) if isinstance(value, tuple) else repr(value)
            if key == "kernel_size":
                pieces.append(text)
            elif value != defaults.get(key):
                pieces.append(f"{key}={text}")
        return f"F.{name}({', '.join(pieces)})"

    return lower


for _op in O.ops_of_kind(O.OpKind.LIBRARY):
    if "spatial" in _op.meta:
        lowers(_op.name)(_library(_op.name))


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
    if compute is not None or node.op == "cast":
        return set()
    return {j for j in node.inputs if program.nodes[j].dtype != node.dtype}


def _lower(program: Program, i: int, args: list[str], compute: DType | None) -> str:
    """Node ``i``'s expression over operands already in its dtype."""
    node = program.nodes[i]
    lower = LOWERINGS.get(node.op)
    if lower is None:
        raise UnknownOperation(f"{node.op}: no PyTorch lowering; add one to axon_eg.backends.torch.lower.LOWERINGS")
    bindings = program.bindings
    attrs = O.Attrs(tuple((k, _bind(v, bindings)) for k, v in node.attrs.items()))
    if node.op == "cast":
        source, target = (compute or d for d in (program.nodes[node.inputs[0]].dtype, node.dtype))
        if source == target:
            return args[0]
        attrs = attrs.replace(dtype=target)
    in_shapes = [program.concrete_shape(j) for j in node.inputs]
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
    return binary and len(others) == 1 and program.nodes[others[0]].op != "constant"


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
        if node.op == "input":
            refs[i] = params[i]
            continue
        if node.op == "constant":
            value = scalars[i] = literal(node.attrs["value"])
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


__all__ = ["LOWERINGS", "Lowering", "emit_function", "emit_module", "expr", "input_names", "missing_lowerings"]
