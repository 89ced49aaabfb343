"""PyTorch expressions of the composite and library ops (part of :mod:`axon_eg.backends.torch.lower`, which
imports this module): a composite lowers to the ``F.*`` call where its semantics are the registry's for
the shapes at hand, else to its expansion; a library op (convolution, pooling) to the
``torch.nn.functional`` call of the same name. Importing this module registers them in ``LOWERINGS``.
"""

from __future__ import annotations

import math

from axon_eg.backends.torch.expressions import (
    Lowering,
    Shape,
    atom,
    dim_arg,
    ints,
    literal,
    lowers,
    triangle,
)
from axon_eg.ir import ops as O


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
    return lambda args, a, ins, out, b: f"{fn}({args[0]}, dim={dim_arg(a['axis'], len(ins[0]))})"


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
                m = f"torch.where({triangle(rows, cols, m, 'tril()')}, {m}, float('-inf'))"
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
        scores = f"({scores}).masked_fill({triangle(rows, cols, q, 'triu(1)')}, float('-inf'))"
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



@lowers("sort")
def _sort(args, a, ins, out, b):  # stable, as the registry's reference: equal values keep their order
    desc = ", descending=True" if a["descending"] else ""
    return f"torch.sort({args[0]}, dim={a['axis']}{desc}, stable=True).values"


@lowers("argsort")
def _argsort(args, a, ins, out, b):
    desc = ", descending=True" if a["descending"] else ""
    return f"torch.sort({args[0]}, dim={a['axis']}{desc}, stable=True).indices"


def _topk(field: str) -> Lowering:
    def lower(args, a, ins, out, b):
        smallest = ", largest=False" if not a["largest"] else ""
        return f"torch.topk({args[0]}, {a['k']}, dim={a['axis']}{smallest}).{field}"

    return lower


lowers("topk")(_topk("values"))
lowers("topk_indices")(_topk("indices"))
