"""The PyTorch backend: every registry op lowers, and the emitted code computes what the float64
interpreter computes (random programs, the benchmark suite, the KernelBench problems)."""

from __future__ import annotations

import ast
import math
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from benchmarks.suite import SUITE
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.backends.torch import LOWERINGS, emit_function, emit_module, expr, missing_lowerings
from axon_eg.errors import ProgramError
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder
from axon_eg.ir.dtypes import bf16, fp16, fp32
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program
from axon_eg.ir.torch_import import load_problem
from axon_eg.testing.strategies import SKIPPED_OPS, programs_with_inputs

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = sorted((ROOT / "benchmarks" / "problems").glob("*.py"))
LIBRARY_OPS = [op.name for op in O.ops_of_kind(O.OpKind.LIBRARY) if op.name not in SKIPPED_OPS]
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64,
                "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}


def load(program: Program) -> types.ModuleType:
    """The emitted module, executed."""
    module = types.ModuleType(f"lowered_{program.name}")
    exec(compile(emit_module(program), f"<torch lowering of {program.name}>", "exec"), module.__dict__)
    return module


def as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def assert_reference_matches(program: Program, inputs: dict[str, np.ndarray]) -> None:
    """reference (the emitted code in float64) == the NumPy interpreter, to 1e-9."""
    got = load(program).reference(*[inputs[s.name] for s in program.inputs])
    want = interpret(program, inputs)
    assert isinstance(got, tuple) == isinstance(want, tuple), "one output is one array, several a tuple"
    for o, g, w in zip(program.outputs, as_tuple(got), as_tuple(want)):
        assert isinstance(g, np.ndarray) and g.dtype == np.float64 and g.shape == w.shape, program.nodes[o].op
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=f"{program}\n\n{emit_function(program)}")


def eager_on(program: Program, inputs: dict[str, np.ndarray], dtype: torch.dtype | None = None):
    """eager on the inputs as tensors of their declared dtypes (or ``dtype``)."""
    tensors = [torch.from_numpy(inputs[s.name]).to(dtype or TORCH_DTYPES[s.dtype.name]) for s in program.inputs]
    with torch.no_grad():
        return as_tuple(load(program).eager(*tensors))


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------
def test_every_registry_op_has_a_lowering():
    missing = missing_lowerings()
    assert not missing, f"ops without a PyTorch lowering in axon_eg.backends.torch.lower: {', '.join(missing)}"
    assert set(LOWERINGS) == set(O.REGISTRY), f"lowerings of unknown ops: {sorted(set(LOWERINGS) - set(O.REGISTRY))}"


def test_emitted_module_imports_only_torch():
    program = SUITE[0].bound(small=True)
    tree = ast.parse(emit_module(program))
    imported = {alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names}
    assert imported == {"torch", "torch.nn.functional"}
    assert not any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))


# ------------------------------------------------------------------------------------------------
# Random programs
# ------------------------------------------------------------------------------------------------
@settings(max_examples=100)
@given(programs_with_inputs(max_nodes=6, dtypes=(bf16, fp16, fp32)))
def test_reference_matches_the_interpreter_on_random_programs(case):
    assert_reference_matches(*case)


@settings(max_examples=30)
@given(programs_with_inputs(max_nodes=4, ops=[*LIBRARY_OPS, "relu", "add", "sigmoid"]))
def test_reference_matches_the_interpreter_on_library_ops(case):
    assert_reference_matches(*case)


@settings(max_examples=60)
@given(programs_with_inputs(max_nodes=6, dtypes=(bf16, fp16, fp32)))
def test_eager_keeps_the_registry_dtypes_shapes_and_contiguity(case):
    program, inputs = case
    for o, out in zip(program.outputs, eager_on(program, inputs)):
        node = program.nodes[o]
        assert out.dtype == TORCH_DTYPES[node.dtype.name], f"{node.op}: {out.dtype}, registry says {node.dtype}"
        assert tuple(out.shape) == program.concrete_shape(o) and out.is_contiguous(), node.op


@settings(max_examples=20)
@given(programs_with_inputs(max_nodes=6))
def test_the_source_is_deterministic(case):
    program, _ = case
    text = emit_module(program)
    assert text == emit_module(program) == emit_module(Program.from_json(program.to_json()))
    assert program.hash in text


# ------------------------------------------------------------------------------------------------
# The benchmark suite and the KernelBench problems
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", SUITE, ids=[e.name for e in SUITE])
def test_suite_programs_lower_and_match(entry):
    program = entry.bound(small=True)
    inputs = random_inputs(program, seed=5)
    assert_reference_matches(program, inputs)
    want = as_tuple(interpret(program, inputs))
    for got, w in zip(eager_on(program, inputs, torch.float32), want):  # fp32 eager: loose
        assert got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-4, atol=1e-4, err_msg=entry.name)


def small_sizes(path: Path) -> dict[str, int]:
    """The problem file's SMALL_SIZES overrides (read without running the file)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SMALL_SIZES" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_problems_lower_and_match(path):
    problem = load_problem(path, sizes=small_sizes(path))
    assert_reference_matches(problem.program, problem.random_inputs(seed=2))


# ------------------------------------------------------------------------------------------------
# Lowerings in detail
# ------------------------------------------------------------------------------------------------
def build(fn, *specs, name="p", **dims) -> Program:
    b = Builder(name)
    ins = [b.input(n, shape, dtype) for n, shape, dtype in specs]
    return b.build(fn(b, *ins), dims=dims or None)


@pytest.mark.parametrize("op, attrs, shapes, text", [
    ("rmsnorm", {"eps": 1e-6}, [(3, 4), (4,)], "F.rms_norm(x0, (4,), weight=x1, eps=1e-06)"),
    ("layernorm", {}, [(3, 4), (4,), (4,)], "F.layer_norm(x0, (4,), weight=x1, bias=x2, eps=1e-05)"),
    ("layernorm", {"axes": (-2, -1)}, [(2, 3, 4), (4,)], "F.layer_norm(x0, (3, 4), eps=1e-05) * x1"),
    ("sdpa", {"causal": True}, [(2, 4, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8)],
     "F.scaled_dot_product_attention(x0, x1, x2, is_causal=True, enable_gqa=True)"),
    ("softmax", {"axis": 1}, [(3, 4)], "torch.softmax(x0, dim=-1)"),
    ("gelu", {"approximate": "tanh"}, [(3,)], 'F.gelu(x0, approximate="tanh")'),
    ("conv2d", {"stride": 2, "padding": 1}, [(1, 2, 5, 5), (3, 2, 3, 3)], "F.conv2d(x0, x1, stride=2, padding=1)"),
    ("max_pool2d", {"kernel_size": 2}, [(1, 2, 4, 4)], "F.max_pool2d(x0, 2)"),
    ("transpose", {"perm": (1, 0)}, [(3, 4)], "x0.T"),
    ("slice", {"axis": 1, "start": 1, "step": 2}, [(3, 4)], "x0[..., 1::2]"),
    ("clamp", {"lo": 0.0}, [(3,)], "torch.clamp(x0, min=0.0)"),
])
def test_idiomatic_lowerings(op, attrs, shapes, text):
    program = build(lambda b, *xs: b.emit(op, *xs, **attrs), *[(f"x{i}", s, fp32) for i, s in enumerate(shapes)])
    node = program.outputs[0]
    assert expr(program, node, [f"x{i}" for i in range(len(shapes))]) == text
    assert_reference_matches(program, random_inputs(program, seed=1))


@pytest.mark.parametrize("op, attrs, shapes, piece", [
    ("sdpa", {"causal": True}, [(5, 8), (6, 8), (6, 3), (1, 5, 6)], "torch.softmax("),  # the mask adds an axis
    ("sdpa", {"scale": 0.5}, [(2, 4, 5, 8), (1, 2, 6, 8), (1, 2, 6, 3)], "repeat_interleave(2, dim=-3)"),
    ("sdpa", {"causal": True}, [(1, 2, 5, 8), (1, 2, 6, 8), (1, 2, 6, 3), (6,)], "torch.where("),
    ("linear", {}, [(3, 5), (4, 5), (3, 4)], "F.linear(x0, x1) + x2"),
    ("groupnorm", {"groups": 2}, [(1, 2), (2,)], "F.layer_norm(x0.reshape(1, 2, 1), (1,), eps=1e-05)"),
    ("batchnorm", {"axis": -1}, [(2, 3, 4), (4,), (4,), (4,)], "torch.rsqrt("),
    ("rmsnorm", {"axes": (-2, -1)}, [(2, 3, 4), (4,)], "F.rms_norm(x0, (3, 4), eps=1e-06) * x1"),
])
def test_expansions_where_the_torch_call_differs(op, attrs, shapes, piece):
    program = build(lambda b, *xs: b.emit(op, *xs, **attrs), *[(f"x{i}", s, fp32) for i, s in enumerate(shapes)])
    assert piece in expr(program, program.outputs[0], [f"x{i}" for i in range(len(shapes))])
    inputs = random_inputs(program, seed=1)
    assert_reference_matches(program, inputs)
    np.testing.assert_allclose(eager_on(program, inputs)[0].numpy(), interpret(program, inputs), rtol=1e-5, atol=1e-5)


def test_promotion_casts_in_eager_and_not_in_float64():
    program = build(lambda b, x, y: b.emit("add", x, y), ("x", (3,), bf16), ("y", (3,), fp32))
    assert "x_fp32 = x.to(torch.float32)\n    v2 = x_fp32 + y" in emit_function(program)
    assert ".to(" not in emit_function(program, compute_dtype="float64")
    cast = build(lambda b, x: b.emit("cast", x, dtype=bf16), ("x", (3,), fp32))
    assert "x.to(torch.bfloat16)" in emit_function(cast)
    assert ".to(" not in emit_function(cast, compute_dtype=torch.float64)


def test_constants_are_literals_or_tensors_on_the_inputs_device():
    def fn(b, x):
        two = b.constant(2.0, fp32)
        return [b.emit("maximum", x, b.constant(-math.inf, fp32)), b.emit("exp", two), b.emit("mul", x, two)]

    program = build(fn, ("x", (3,), fp32))
    source = emit_function(program)
    assert "torch.clamp(x, min=float('-inf'))" in source and "x * 2.0" in source
    assert "torch.tensor(2.0, dtype=torch.float32, device=x.device)" in source
    assert_reference_matches(program, random_inputs(program, seed=3))


def test_input_names_become_unique_identifiers():
    program = build(lambda b, *xs: b.emit("add", b.emit("add", xs[0], xs[1]), b.emit("add", xs[2], xs[3])),
                    ("fc.weight", (2,), fp32), ("def", (2,), fp32), ("v1", (2,), fp32), ("fc_weight", (2,), fp32))
    assert emit_function(program).startswith("def forward(fc_weight, def_, v1_, fc_weight_1):")
    assert_reference_matches(program, random_inputs(program, seed=4))


def test_views_are_returned_contiguous_and_outputs_as_a_tuple():
    program = build(lambda b, x: [b.emit("transpose", x, perm=(1, 0)), b.emit("exp", b.emit("transpose", x, perm=(1, 0)))],
                    ("x", (3, 4), fp32))
    assert "return v1.contiguous(), v2.contiguous()" in emit_function(program)
    outs = eager_on(program, random_inputs(program, seed=0))
    assert len(outs) == 2 and all(t.is_contiguous() for t in outs)


def test_unbound_programs_are_refused_and_compiled_is_lazy():
    from axon_eg.ir import dims as D

    program = build(lambda b, x: b.emit("exp", x), ("x", (D.sym("M"),), fp32))
    with pytest.raises(ProgramError, match=r"dims \['M'\] are not bound"):
        emit_module(program)
    module = load(program.bind(M=3))
    assert module._compiled is None and callable(module.compiled)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(0, 2**16))
def test_bit_operations_in_every_reference(m, n, seed):
    """Bit operations on integer inputs (an int4 unpacking: shifts by an int32 vector, a mask, a cast to float):
    the float64 reference on NumPy arrays and on torch tensors (reference_torch, the harness's GPU path, whose
    inputs arrive as float64) and eager on the declared dtypes all equal the interpreter."""
    b = Builder("unpack")
    packed = b.input("packed", (m, n, 1), "int32")
    shifts = b.input("shifts", (8,), "int32")
    x = b.input("x", (m, n, 8), "fp32")
    nibbles = b.emit("bitwise_and", b.emit("bitwise_right_shift", packed, shifts), b.constant(15.0, "int32"))
    # (a left shift stays within int32: the reference computes integers exactly, torch's int32 wraps around)
    flipped = b.emit("bitwise_xor", b.emit("bitwise_not", nibbles),
                     b.emit("bitwise_left_shift", nibbles, b.constant(3.0, "int32")))
    program = b.build([b.emit("mul", b.emit("cast", nibbles, dtype="fp32"), x), flipped])
    rng = np.random.default_rng(seed)
    inputs = {"packed": rng.integers(-2**31, 2**31, (m, n, 1)).astype(np.float64),
              "shifts": np.arange(0, 32, 4, dtype=np.float64), "x": rng.standard_normal((m, n, 8))}
    assert_reference_matches(program, inputs)
    module = load(program)
    tensors = [torch.from_numpy(inputs[s.name]) for s in program.inputs]
    want = interpret(program, inputs)
    for got, w in zip(as_tuple(module.reference_torch(*tensors)), want):
        np.testing.assert_array_equal(got.numpy(), w)
    for got, w in zip(eager_on(program, inputs), want):
        np.testing.assert_allclose(got.double().numpy(), w, rtol=1e-6)
