"""The registry is complete: every op has an example here, and its rules and reference agree.

Adding an op to the registry without adding an example below makes ``test_every_op_has_an_example``
fail, so no op can enter without its shape rule, dtype rule and reference being exercised.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder
from axon_eg.ir.dtypes import DTYPES, bf16, fp16, fp32, int64
from axon_eg.ir.interpret import interpret

# op name -> (input shapes, attributes); shapes use small non-power-of-two sizes
EXAMPLES: dict[str, tuple[list[tuple[int, ...]], dict]] = {
    "input": ([], {"name": "x", "shape": (3, 5), "dtype": fp32}),
    "constant": ([], {"value": 2.5, "dtype": fp32}),
    **{name: ([(3, 5)], {}) for name in (
        "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "square", "relu", "sigmoid", "tanh", "silu",
        "mish", "hardswish", "hardsigmoid", "erf")},
    "leaky_relu": ([(3, 5)], {"slope": 0.2}),
    "gelu": ([(3, 5)], {"approximate": "tanh"}),
    "softplus": ([(3, 5)], {"beta": 2.0, "threshold": 10.0}),
    "clamp": ([(3, 5)], {"lo": -0.5, "hi": 0.7}),
    "pow": ([(3, 5)], {"exponent": 1.5}),
    "cast": ([(3, 5)], {"dtype": bf16}),
    "causal_mask": ([(2, 3, 5)], {"diagonal": 1}),
    **{name: ([(3, 1, 5), (4, 1)], {}) for name in ("add", "sub", "mul", "div", "maximum", "minimum")},
    **{name: ([(3, 4, 5)], {"axes": (0, -1), "keepdims": True}) for name in ("sum", "mean", "max", "min",
                                                                             "logsumexp")},
    "cumsum": ([(3, 5)], {"axis": -1}),
    "cumprod": ([(3, 5)], {"axis": 0}),
    **{name: ([(3, 1, 5), (4, 1)], {}) for name in ("gt", "ge", "lt", "le", "eq", "ne", "logical_and", "logical_or",
                                                     "logical_xor")},
    "logical_not": ([(3, 5)], {}),
    "where": ([(3, 1, 5), (4, 1), (5,)], {}),
    "flip": ([(3, 4, 5)], {"axes": (0, -1)}),
    **{name: ([(3, 1, 5), (4, 1)], {}) for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
                                                     "bitwise_right_shift")},
    "bitwise_not": ([(3, 5)], {}),
    **{name: ([(3, 5)], {}) for name in ("sin", "cos", "floor", "ceil", "round", "trunc", "sign")},
    "sort": ([(3, 4, 5)], {"axis": 1, "descending": True}),
    "argsort": ([(3, 4, 5)], {"axis": -1}),
    "topk": ([(3, 4, 5)], {"k": 2, "axis": 1}),
    "topk_indices": ([(3, 4, 5)], {"k": 3, "axis": -1, "largest": False}),
    "argmax": ([(3, 4, 5)], {"axes": (1,), "keepdims": True}),
    "argmin": ([(3, 4, 5)], {"axes": (-1,)}),
    "gather": ([(3, 7, 5), (2, 4, 5)], {"axis": 1}),
    "index_select": ([(3, 7, 5), (6,)], {"axis": 1}),
    "matmul": ([(2, 1, 3, 5), (4, 5, 6)], {}),
    "transpose": ([(2, 3, 5)], {"perm": (2, 0, 1)}),
    "reshape": ([(2, 3, 5)], {"shape": (6, 5)}),
    "broadcast_to": ([(3, 1)], {"shape": (2, 3, 5)}),
    "expand_dims": ([(3, 5)], {"axis": -1}),
    "squeeze": ([(3, 1, 5)], {"axes": (1,)}),
    "slice": ([(3, 11)], {"axis": 1, "start": 1, "stop": -2, "step": 3}),
    "concat": ([(3, 2), (3, 5), (3, 1)], {"axis": 1}),
    "linear": ([(3, 5), (7, 5), (7,)], {}),
    "softmax": ([(3, 5)], {"axis": 0}),
    "log_softmax": ([(3, 5)], {"axis": -1}),
    "layernorm": ([(3, 4, 5), (4, 5), (4, 5)], {"axes": (1, 2), "eps": 1e-3}),
    "rmsnorm": ([(3, 5), (5,)], {"eps": 1e-3}),
    "groupnorm": ([(2, 6, 3, 3), (6,), (6,)], {"groups": 3}),
    "batchnorm": ([(2, 4, 3), (4,), (4,), (4,), (4,)], {"eps": 1e-3}),
    "dropout": ([(3, 5)], {"p": 0.1}),
    "rope": ([(2, 3, 8), (3, 8), (3, 8)], {}),
    "sdpa": ([(2, 6, 4, 8), (2, 2, 5, 8), (2, 2, 5, 3)], {"causal": True}),
    "conv1d": ([(2, 4, 9), (6, 2, 3), (6,)], {"stride": 2, "padding": 1, "groups": 2}),
    "conv2d": ([(2, 3, 7, 6), (4, 3, 3, 2)], {"dilation": (2, 1)}),
    "conv3d": ([(1, 2, 5, 5, 4), (3, 2, 2, 3, 2), (3,)], {"stride": (1, 2, 1), "padding": 1}),
    "conv_transpose1d": ([(2, 4, 5), (4, 3, 3), (3,)], {"stride": 2, "padding": 1, "output_padding": 1}),
    "conv_transpose2d": ([(2, 4, 5, 4), (4, 1, 3, 2)], {"stride": 2, "groups": 2}),
    "conv_transpose3d": ([(1, 2, 3, 3, 2), (2, 3, 2, 2, 2), (3,)], {"stride": (2, 1, 1)}),
    "max_pool1d": ([(2, 3, 9)], {"kernel_size": 3, "stride": 2, "padding": 1}),
    "max_pool2d": ([(2, 3, 7, 6)], {"kernel_size": 2, "ceil_mode": True}),
    "max_pool3d": ([(1, 2, 5, 5, 4)], {"kernel_size": (2, 2, 1), "dilation": (2, 1, 1)}),
    "avg_pool1d": ([(2, 3, 9)], {"kernel_size": 4, "stride": 3}),
    "avg_pool2d": ([(2, 3, 7, 6)], {"kernel_size": 3, "padding": 1, "count_include_pad": False}),
    "avg_pool3d": ([(1, 2, 5, 5, 4)], {"kernel_size": 2}),
}

# torch float64 ground truth for ops whose NumPy reference could share a bug with our rules
TORCH: dict[str, object] = {
    "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "mish": torch.nn.functional.mish,
    "hardswish": torch.nn.functional.hardswish,
    "hardsigmoid": torch.nn.functional.hardsigmoid,
    "softplus": lambda x: torch.nn.functional.softplus(x, beta=2.0, threshold=10.0),
    "silu": torch.nn.functional.silu,
    "logsumexp": lambda x: torch.logsumexp(x, dim=(0, 2), keepdim=True),
    "cumsum": lambda x: torch.cumsum(x, -1),
    "cumprod": lambda x: torch.cumprod(x, 0),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layernorm": lambda x, w, b: torch.nn.functional.layer_norm(x, (4, 5), w, b, eps=1e-3),
    "rmsnorm": lambda x, w: torch.nn.functional.rms_norm(x, (5,), w, eps=1e-3),
    "groupnorm": lambda x, w, b: torch.nn.functional.group_norm(x, 3, w, b),
    "batchnorm": lambda x, m, v, w, b: torch.nn.functional.batch_norm(x, m, v, w, b, False, 0.0, 1e-3),
    "sdpa": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                             enable_gqa=True),
    "linear": torch.nn.functional.linear,
    **{name: getattr(torch, name) for name in ("gt", "ge", "lt", "le", "eq", "ne", "logical_and", "logical_or",
                                               "logical_xor", "logical_not")},
    "where": lambda c, x, y: torch.where(c != 0, x, y),
    "flip": lambda x: torch.flip(x, (0, 2)),
    **{name: getattr(torch, name) for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
                                               "bitwise_right_shift", "bitwise_not")},
    **{name: getattr(torch, name) for name in ("sin", "cos", "floor", "ceil", "round", "trunc", "sign")},
    "sort": lambda x: torch.sort(x, dim=1, descending=True).values,
    "argsort": lambda x: torch.argsort(x, dim=-1, stable=True),
    "topk": lambda x: torch.topk(x, 2, dim=1).values,
    "topk_indices": lambda x: torch.topk(x, 3, dim=-1, largest=False).indices,
    "argmax": lambda x: torch.argmax(x, dim=1, keepdim=True),
    "argmin": lambda x: torch.argmin(x, dim=-1),
    "gather": lambda x, i: torch.gather(x, 1, i.long()),
    "index_select": lambda x, i: torch.index_select(x, 1, i.long()),
}
INDEXED = {"gather": 1, "index_select": 1}  # op -> the axis its second input indexes (an int64 input)
BITS = {op.name for op in O.all_ops() if op.dtype is O.bitwise}  # int64 inputs


def build(name: str, seed: int = 0):
    shapes, attrs = EXAMPLES[name]
    b = Builder(name)
    if name == "input":
        return b.build(b.input(**attrs)), {"x": np.random.default_rng(seed).standard_normal(attrs["shape"])}
    if name == "constant":
        return b.build(b.constant(**attrs)), {}
    xs = [b.input(f"x{i}", s, int64 if (name in INDEXED and i == 1) or name in BITS else fp32)
          for i, s in enumerate(shapes)]
    program = b.build(b.emit(name, *xs, **attrs))
    rng = np.random.default_rng(seed)
    values = {f"x{i}": rng.uniform(0.5, 2.0, s) if (name in ("log", "sqrt", "rsqrt", "pow") or
                                                      (name == "batchnorm" and i == 2))
              else rng.standard_normal(s) for i, s in enumerate(shapes)}
    if name in BITS:  # integers of both signs; shift amounts past the width included
        values = {f"x{i}": rng.integers(-2**40, 2**40, sh).astype(np.float64) for i, sh in enumerate(shapes)}
        if "shift" in name:
            values["x1"] = rng.integers(0, 70, shapes[1]).astype(np.float64)
    if name in INDEXED:  # indices in range along the indexed axis
        values["x1"] = rng.integers(0, shapes[0][INDEXED[name]], shapes[1]).astype(np.float64)
    return program, values


def test_every_op_has_an_example() -> None:
    missing = sorted(set(O.REGISTRY) - set(EXAMPLES))
    assert not missing, f"registry ops without an example in test_registry.EXAMPLES: {missing}"
    stale = sorted(set(EXAMPLES) - set(O.REGISTRY))
    assert not stale, f"examples for ops that are not registered: {stale}"


@pytest.mark.parametrize("name", sorted(O.REGISTRY))
def test_op_definition_is_complete(name: str) -> None:
    op = O.get(name)
    assert op.name == name and isinstance(op.kind, O.OpKind)
    assert callable(op.shape) and callable(op.dtype) and callable(op.reference), name
    assert op.doc, f"{name} has no doc"
    assert (op.kind is O.OpKind.COMPOSITE) == (op.expand is not None), f"{name}: expand iff composite"
    lo, hi = op.arity
    assert lo >= 0 and (hi is None or hi >= lo)
    if op.kind is not O.OpKind.SOURCE:
        assert len(op.inputs) >= (hi or 1), f"{name}: every tensor input needs a name"
    for a in op.attrs:
        if not a.required:  # defaults must pass their own validation
            assert a.coerce(name, a.default) == a.default or a.default is None or a.default == ()


@pytest.mark.parametrize("name", sorted(O.REGISTRY))
def test_shape_and_dtype_rules_agree_with_reference(name: str) -> None:
    program, values = build(name)
    out = interpret(program, values)  # asserts the reference's shape equals the shape rule's
    assert out.shape == program.concrete_shape(program.outputs[0])
    assert program.nodes[program.outputs[0]].dtype in DTYPES.values()
    if values:
        assert np.isfinite(out).any(), f"{name}: reference gave no finite value"


@pytest.mark.parametrize("name", sorted(TORCH))
def test_reference_matches_torch(name: str) -> None:
    program, values = build(name, seed=3)
    args = [torch.from_numpy(values[f"x{i}"]) for i in range(len(values))]
    want = TORCH[name](*[x.long() if name in BITS else x for x in args]).numpy()
    np.testing.assert_allclose(interpret(program, values), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(op.name for op in O.ops_of_kind(O.OpKind.COMPOSITE)))
@given(seed=st.integers(0, 2**16))
def test_composite_expansion_matches_direct_reference(name: str, seed: int) -> None:
    program, values = build(name, seed)
    expanded = program.expand()
    assert all(O.get(n.op).kind is not O.OpKind.COMPOSITE for n in expanded.nodes)
    np.testing.assert_allclose(interpret(expanded, values), interpret(program, values), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["matmul", "sum", "mean", "logsumexp", "cumsum", "conv2d"])
def test_accumulating_ops_are_flagged(name: str) -> None:
    assert O.get(name).accumulates


@pytest.mark.parametrize("a,b,want", [(bf16, bf16, bf16), (bf16, fp16, fp32), (fp16, fp32, fp32)])
def test_binary_dtype_promotion(a, b, want) -> None:
    bld = Builder()
    out = bld.emit("add", bld.input("x", (2,), a), bld.input("y", (2,), b))
    assert out.dtype == want


def test_reference_handles_infinite_attributes() -> None:
    program, values = build("causal_mask")
    out = interpret(program, values)
    assert np.isneginf(out[..., 0, 2:]).all() and np.isfinite(out[..., 0, :2]).all()
    assert math.isinf(O.get("clamp").make_attrs({})["lo"])
