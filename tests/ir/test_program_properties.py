"""Properties of random programs (axon_eg.testing.strategies): shape and dtype rules agree with the
float64 reference, expanding composites keeps shapes, dtypes and values, JSON and hashes are faithful
(also in a fresh process), and printing is deterministic."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.errors import InvalidAttribute, ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder
from axon_eg.ir.dtypes import DTYPES, fp32, int64
from axon_eg.ir.inputs import positive_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program
from axon_eg.testing import SKIPPED_OPS, SOURCE_OPS, drawn_ops, make_inputs, programs, programs_with_inputs

ROOT = Path(__file__).resolve().parents[2]
COMPOSITES = [op.name for op in O.ops_of_kind(O.OpKind.COMPOSITE) if op.name in drawn_ops()]
# a fraction of the profile's examples for tests that run once per op
PER_OP = settings(max_examples=max(3, settings.default.max_examples // 10))

any_program = st.one_of(programs(), programs(bound=False), programs(symbolic=False), programs(allow_library=True))


def outputs_of(result: Any) -> tuple[np.ndarray, ...]:
    return result if isinstance(result, tuple) else (result,)


def check_against_reference(program: Program, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Interpret (which asserts every node's shape rule against its reference) and check the outputs."""
    results = outputs_of(interpret(program, inputs))
    assert len(results) == len(program.outputs)
    for out, node_id in zip(results, program.outputs):
        node = program.nodes[node_id]
        assert out.shape == program.concrete_shape(node_id)
        assert out.ndim == len(node.shape)
        assert np.all(np.isfinite(out)), f"the strategy should keep values finite:\n{program}"
    for node in program.nodes:
        assert DTYPES.get(node.dtype.name) == node.dtype
    return results


# -- the strategy covers the registry ------------------------------------------------------------
def test_every_registry_op_is_drawn_a_source_or_skipped() -> None:
    drawn = set(drawn_ops())
    for name in O.REGISTRY:
        assert (name in drawn) + (name in SOURCE_OPS) + (name in SKIPPED_OPS) == 1, name
    assert all(reason.strip() for reason in SKIPPED_OPS.values())


@pytest.mark.parametrize("name", drawn_ops())
@PER_OP
@given(data=st.data())
def test_each_drawn_op_appears_and_agrees_with_its_reference(name: str, data: st.DataObject) -> None:
    program, inputs = data.draw(programs_with_inputs(ops=[name], max_nodes=2))
    assert name in {n.op for n in program.nodes}
    check_against_reference(program, inputs)


NEW_OPS = [  # ops of existing kinds that the strategy has never heard of
    O.OpDef("cube_for_test", O.OpKind.ELEMENTWISE, (1, 1), shape=O.same_shape, dtype=O.same_dtype,
            reference=lambda xs, a: a["gain"] * xs[0] ** 3, attrs=(O.Attr("gain", "float", 1.0),), inputs=("x",),
            meta={"arity": 1}),
    O.OpDef("hypot_for_test", O.OpKind.ELEMENTWISE, (2, 2), shape=lambda s, a: O.broadcast_shapes(*s),
            dtype=O.promoted, reference=lambda xs, a: np.hypot(*xs), inputs=("x", "y"), meta={"arity": 2}),
    O.OpDef("prod_for_test", O.OpKind.REDUCE, (1, 1), shape=O._reduce_shape, dtype=O.same_dtype,
            reference=lambda xs, a: np.prod(xs[0], axis=a["axes"], keepdims=a["keepdims"]),
            attrs=(O.Attr("axes", "ints", ()), O.Attr("keepdims", "bool", False)), canon=O._axes_canon,
            inputs=("x",)),
]


@pytest.mark.parametrize("op", NEW_OPS, ids=lambda op: op.name)
def test_a_new_op_of_an_existing_kind_is_drawn_without_edits(op: O.OpDef, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(O.REGISTRY, op.name, op)
    assert op.name in drawn_ops()

    @PER_OP
    @given(programs_with_inputs(ops=[op.name], max_nodes=2))
    def check(case: tuple[Program, dict[str, np.ndarray]]) -> None:
        assert op.name in {n.op for n in case[0].nodes}
        check_against_reference(*case)

    check()


@given(programs(ops=["add", "exp", "sum", "sigmoid"], max_nodes=6))
def test_ops_restricts_every_op_in_the_program(program: Program) -> None:
    assert {n.op for n in program.nodes} <= {"add", "exp", "sum", "sigmoid", *SOURCE_OPS}


def test_ops_must_be_drawable() -> None:
    with pytest.raises(ValueError, match="not drawable"):
        programs(ops=["no_such_op"])


@given(programs_with_inputs())
def test_program_inputs_are_nonzero_and_positive_where_needed(case: tuple[Program, dict[str, np.ndarray]]) -> None:
    program, inputs = case
    positive = positive_inputs(program)
    assert sorted(inputs) == sorted(spec.name for spec in program.inputs)
    for spec, node in zip(program.inputs, program.input_ids):
        x = inputs[spec.name]
        assert x.dtype == np.float64 and x.shape == program.concrete_shape(node)
        assert np.all(x != 0)
        assert spec.name not in positive or np.all(x > 0)


# -- shapes, dtypes and meaning ------------------------------------------------------------------
@given(st.one_of(programs_with_inputs(), programs_with_inputs(allow_library=True), programs_with_inputs(max_nodes=3)))
def test_shape_rules_agree_with_the_reference(case: tuple[Program, dict[str, np.ndarray]]) -> None:
    check_against_reference(*case)


@given(st.one_of(programs_with_inputs(), programs_with_inputs(ops=[*COMPOSITES, "add", "transpose", "reshape"])))
def test_expanding_composites_keeps_shapes_dtypes_and_values(case: tuple[Program, dict[str, np.ndarray]]) -> None:
    program, inputs = case
    expanded = program.expand()
    assert not any(O.get(n.op).kind is O.OpKind.COMPOSITE for n in expanded.nodes)
    assert expanded.inputs == program.inputs
    for mine, theirs in zip(program.outputs, expanded.outputs):
        assert expanded.nodes[theirs].shape == program.nodes[mine].shape
        assert expanded.nodes[theirs].dtype == program.nodes[mine].dtype
    direct = outputs_of(interpret(program, inputs))
    via_primitives = outputs_of(interpret(program, inputs, expand=True))
    for want, got in zip(direct, via_primitives):
        scale = float(np.max(np.abs(want), initial=1.0))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * scale, equal_nan=True, err_msg=str(program))


# -- identity: JSON, hash, str -------------------------------------------------------------------
@given(any_program)
def test_json_round_trip_keeps_program_hash_and_text(program: Program) -> None:
    text = program.to_json()
    back = Program.from_json(text)
    assert back == program
    assert back.hash == program.hash
    assert str(back) == str(program)
    assert back.to_json() == text


HASH_IN_CHILD = """
import json, sys
from axon_eg.ir.program import Program
programs = [Program.from_json(text) for text in json.load(open(sys.argv[1]))]
print(json.dumps([[p.hash, str(p)] for p in programs]))
"""


@settings(max_examples=1)
@given(st.lists(any_program, min_size=6, max_size=6))
def test_hash_and_str_are_the_same_in_a_fresh_process(batch: list[Program]) -> None:
    seed = os.environ.get("PYTHONHASHSEED", "")
    env = {**os.environ, "PYTHONHASHSEED": str(int(seed) + 1 if seed.isdigit() else 12345),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "programs.json"
        path.write_text(json.dumps([p.to_json() for p in batch]))
        child = subprocess.run([sys.executable, "-c", HASH_IN_CHILD, str(path)], env=env, capture_output=True,
                               text=True, timeout=60, check=True)
    assert json.loads(child.stdout) == [[p.hash, str(p)] for p in batch]


def _different(value: Any) -> Any:
    """Another valid-looking value of the same kind of attribute."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.0 if math.isfinite(value) else 1.0
    if isinstance(value, str):
        return value + "_"
    if isinstance(value, tuple):
        return (_different(value[0]), *value[1:]) if value else (1,)
    if isinstance(value, D.Sym):
        return D.add(value, 1)
    if value is None:
        return 1
    return next(d for d in DTYPES.values() if d != value)


def _with_node(program: Program, i: int, **changes: Any) -> Program:
    nodes = list(program.nodes)
    nodes[i] = dataclasses.replace(nodes[i], **changes)
    return dataclasses.replace(program, nodes=tuple(nodes))


@given(any_program, st.data())
def test_hash_changes_with_one_attribute_dtype_or_binding(program: Program, data: st.DataObject) -> None:
    i, key = data.draw(st.sampled_from([(i, k) for i, n in enumerate(program.nodes) for k in n.attrs]))
    attrs = program.nodes[i].attrs
    changed = [_with_node(program, i, attrs=attrs.replace(**{key: _different(attrs[key])}))]
    i = data.draw(st.integers(0, len(program.nodes) - 1))
    changed.append(_with_node(program, i, dtype=_different(program.nodes[i].dtype)))
    if program.dims:
        name = data.draw(st.sampled_from(sorted(program.bindings)))
        changed.append(dataclasses.replace(program, dims=tuple(sorted({**program.bindings,
                                                                      name: program.bindings[name] + 1}.items()))))
    for other in changed:
        assert other != program
        assert other.hash != program.hash


@given(any_program)
def test_str_is_deterministic_and_names_every_op(program: Program) -> None:
    text = str(program)
    assert text == str(dataclasses.replace(program))
    for node in program.nodes:
        assert (f"{node.op}(" in text) if node.op not in SOURCE_OPS else True
    for spec in program.inputs:
        assert f"{spec.name}: {spec.dtype}" in text


# -- regressions found by the properties above ---------------------------------------------------
def _scalar_program(op: str, **attrs: Any) -> Program:
    b = Builder("scalar")
    dtype = int64 if O.get(op).dtype is O.bitwise else fp32  # bit operations take integers
    return b.build(b.emit(op, b.input("x", (), dtype), **attrs))


@pytest.mark.parametrize("name", [op.name for op in O.all_ops() if op.arity[0] == 1
                                  and {"axis", "axes"} & {a.name for a in op.attrs}])
@pytest.mark.parametrize("axis", [0, -1])
def test_an_axis_of_a_scalar_is_refused_or_computed_consistently(name: str, axis: int) -> None:
    op = O.get(name)
    key = "axis" if "axis" in {a.name for a in op.attrs} else "axes"
    try:
        program = _scalar_program(name, **{key: axis if key == "axis" else (axis,)})
    except (ShapeError, InvalidAttribute):
        return
    assert interpret(program, {"x": np.float64(0.5)}).shape == program.concrete_shape(program.outputs[0])


@pytest.mark.parametrize("name", [op.name for op in O.ops_of_kind(O.OpKind.ELEMENTWISE) if op.meta["arity"] == 1
                                  and not op.meta.get("index_dependent")])
def test_unary_ops_keep_a_scalar_a_scalar(name: str) -> None:
    attrs = {"cast": {"dtype": fp32}, "pow": {"exponent": 2.0}}.get(name, {})
    program = _scalar_program(name, **attrs)
    assert interpret(program, {"x": np.float64(0.5 if program.inputs[0].dtype.is_float else 5)}).shape == ()


def test_negative_zero_is_not_merged_with_zero() -> None:
    b = Builder()
    x = b.input("x", (3,), fp32)
    pos, neg = (b.emit("div", x, b.constant(c, fp32)) for c in (0.0, -0.0))
    assert pos.id != neg.id
    program = b.build(b.emit("add", pos, neg))
    with np.errstate(invalid="ignore"):  # inf + -inf
        assert np.all(np.isnan(interpret(program, {"x": np.ones(3)})))
    assert Program.from_json(program.to_json()) == program
    b2 = Builder()
    one = b2.build(b2.emit("mul", b2.input("x", (3,), fp32), b2.constant(0.0, fp32)))
    b3 = Builder()
    other = b3.build(b3.emit("mul", b3.input("x", (3,), fp32), b3.constant(-0.0, fp32)))
    assert one != other and one.hash != other.hash


def test_grouped_query_attention_takes_a_mask_per_query_head() -> None:
    b = Builder()
    q, k, v = (b.input(n, s, fp32) for n, s in (("q", (2, 4, 3, 5)), ("k", (2, 2, 6, 5)), ("v", (2, 2, 6, 3))))
    mask = b.input("mask", (2, 4, 3, 6), fp32)
    program = b.build(b.emit("sdpa", q, k, v, mask, causal=True))
    inputs = make_inputs(program, 0)
    np.testing.assert_allclose(interpret(program, inputs, expand=True), interpret(program, inputs), rtol=1e-12)


def test_avg_pool3d_refuses_an_input_smaller_than_its_kernel() -> None:
    b = Builder()
    with pytest.raises(ShapeError, match="smaller than the kernel"):
        b.emit("avg_pool3d", b.input("x", (1, 1, 4, 4, 1), fp32), kernel_size=(1, 1, 2), padding=(0, 0, 1))
