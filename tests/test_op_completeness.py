"""Every registered op against every per-op interpretation table.

An op is declared once, in the registry (``axon_eg.ir.ops``); each stage that interprets ops one by one
keeps a table keyed by op name (its Z3 meaning, its Triton and torch expressions, its value envelope for
the hypothesis strategies, its NKI tile lowering, ...). ``TABLES`` names each table and says which ops it
must cover; ``EXEMPT`` lists, with the reason, each (table, op) that is knowingly absent. Adding an op is
one registry entry plus one line per table this test names.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from axon_eg.backends.nki import synthesis_space as nki_space
from axon_eg.backends.torch import LOWERINGS as TORCH
from axon_eg.backends.triton import tl_expressions as triton_ops
from axon_eg.egraph.schema import SHAPE_FAMILIES
from axon_eg.ir import ops as O
from axon_eg.rules_discovered import enumerate as rule_enum
from axon_eg.semantics.isa.instructions import ACTIVATIONS as NKI_ACTIVATIONS
from axon_eg.semantics.op_semantics import has_semantics
from axon_eg.testing import envelopes, op_generators, strategies

Kind = O.OpKind


def _elementwise(op: O.OpDef, arity: int) -> bool:
    return op.kind is Kind.ELEMENTWISE and op.meta.get("arity") == arity


def _reference(op: O.OpDef) -> bool | None:
    return None if op.kind is Kind.SOURCE else callable(op.reference)


def _shape_rule(op: O.OpDef) -> bool | None:
    if op.kind is Kind.COMPOSITE:  # expanded before anything reads a shape family
        return None
    try:
        return O.shape_family(op) in SHAPE_FAMILIES
    except KeyError:
        return False


def _triton_elementwise(op: O.OpDef) -> bool | None:
    return op.name in triton_ops.ELEMENTWISE if op.kind is Kind.ELEMENTWISE else None


def _triton_reductions(op: O.OpDef) -> bool | None:
    return op.name in triton_ops.REDUCTIONS if op.kind is Kind.REDUCE else None


def _strategies(op: O.OpDef) -> bool:
    return op.name in strategies.drawn_ops() or op.name in strategies.SOURCE_OPS or op.name in strategies.SKIPPED_OPS


def _envelopes(op: O.OpDef) -> bool | None:
    if _elementwise(op, 1):
        return op.name in envelopes.UNARY_ENV
    if _elementwise(op, 2):
        return op.name in envelopes.BINARY_ENV
    if op.kind in (Kind.REDUCE, Kind.SCAN):
        return op.name in envelopes.REDUCE_ENV
    return None


def _op_generators(op: O.OpDef) -> bool | None:
    if op.kind is Kind.LAYOUT:
        return op.name in op_generators.LAYOUT_ATTRS
    if op.kind is Kind.COMPOSITE:
        return op.name in op_generators.COMPOSITES
    return None


def _nki_tile_ops(op: O.OpDef) -> bool | None:
    if _elementwise(op, 1):
        return op.name in {name for name, _ in nki_space.UNARY_OPS}
    if _elementwise(op, 2):
        return op.name in nki_space.BINARY_OPS
    if op.kind is Kind.REDUCE:
        return op.name in nki_space.REDUCTIONS
    return None


def _nki_activations(op: O.OpDef) -> bool | None:
    return op.name in NKI_ACTIVATIONS if op.meta.get("activation") else None


def _rule_attrs(op: O.OpDef) -> bool | None:
    if op not in rule_enum.unary_ops() or not any(a.required for a in op.attrs):
        return None
    return op.name in rule_enum._SAMPLE_ATTRS


# table name -> check(op): True (covered), False (missing), None (the table is not for this kind of op)
TABLES: dict[str, Callable[[O.OpDef], bool | None]] = {
    "NumPy reference (ir/ops.py OpDef.reference)": _reference,
    "shape rule (egraph/schema.py SHAPE_FAMILIES via ops.shape_family)": _shape_rule,
    "Z3 semantics (semantics/op_semantics.py UNARY/BINARY/_STRUCTURED)": lambda op: has_semantics(op),
    "Triton expressions (backends/triton/tl_expressions.py ELEMENTWISE)": _triton_elementwise,
    "Triton reductions (backends/triton/tl_expressions.py REDUCTIONS)": _triton_reductions,
    "torch expressions (backends/torch/expressions.py, composite_expressions.py LOWERINGS)":
        lambda op: op.name in TORCH,
    "hypothesis strategies (testing/strategies.py drawn_ops)": _strategies,
    "value envelopes (testing/envelopes.py UNARY_ENV/BINARY_ENV/REDUCE_ENV)": _envelopes,
    "op generators (testing/op_generators.py LAYOUT_ATTRS/COMPOSITES)": _op_generators,
    "NKI tile ops (backends/nki/synthesis_space.py UNARY_OPS/BINARY_OPS/REDUCTIONS)": _nki_tile_ops,
    "NKI activation functions (semantics/isa/instructions.py ACTIVATIONS)": _nki_activations,
    "rule enumeration attributes (rules_discovered/enumerate.py _SAMPLE_ATTRS)": _rule_attrs,
}

_TRITON = "Triton expressions (backends/triton/tl_expressions.py ELEMENTWISE)"
_TRITON_RED = "Triton reductions (backends/triton/tl_expressions.py REDUCTIONS)"
_NKI = "NKI tile ops (backends/nki/synthesis_space.py UNARY_OPS/BINARY_OPS/REDUCTIONS)"
_NKI_ACT = "NKI activation functions (semantics/isa/instructions.py ACTIVATIONS)"
_OPGEN = "op generators (testing/op_generators.py LAYOUT_ATTRS/COMPOSITES)"
_NO_NKI = "no NKI tile lowering yet: a group using it is not lowered to NKI (NotLowerable)"
_ENVELOPES = "value envelopes (testing/envelopes.py UNARY_ENV/BINARY_ENV/REDUCE_ENV)"

EXEMPT: dict[tuple[str, str], str] = {
    (_TRITON, "causal_mask"): "index-dependent: computed from the element's indices by the element-wise emitter "
                              "(triton/elementwise.py) and matched inside the attention kernel (triton/attention_match.py)",
    (_TRITON_RED, "logsumexp"): "built from max and sum by the row-reduction kernel (triton/reduction.py)",
    (_OPGEN, "concat"): "variadic: drawn by strategies' own concat step, not from LAYOUT_ATTRS",
    (_NKI, "leaky_relu"): _NO_NKI,
    (_NKI, "mish"): _NO_NKI,
    (_NKI, "hardswish"): _NO_NKI,
    (_NKI, "hardsigmoid"): _NO_NKI,
    (_NKI, "clamp"): _NO_NKI,
    (_NKI, "pow"): _NO_NKI,
    (_NKI, "cast"): _NO_NKI,
    (_NKI, "causal_mask"): "index-dependent: no tile-level form (an attention mask needs the tile's indices)",
    (_NKI, "logsumexp"): _NO_NKI,
    **{(_NKI, op.name): "a boolean result (comparison or logic): no NKI tile lowering yet; the group stays in torch"
       for op in O.all_ops() if op.meta.get("logical") and op.meta.get("arity") in (1, 2)},
    **{(table, op.name): "returns integer indices (meta indices): its group stays in torch"
       for op in O.all_ops() if op.meta.get("indices") and op.kind is O.OpKind.REDUCE for table in (_NKI, _TRITON_RED)},
    **{(_ENVELOPES, op.name): "returns integer indices (meta indices): not drawn (strategies.SKIPPED_OPS)"
       for op in O.all_ops() if op.meta.get("indices") and op.kind is O.OpKind.REDUCE},
    **{(_OPGEN, op.name): "reads integer indices (meta indices): not drawn (strategies.SKIPPED_OPS)"
       for op in O.all_ops() if op.meta.get("indices") and op.kind is O.OpKind.LAYOUT},
    **{(_ENVELOPES, op.name): "opaque to the prover (meta opaque): not drawn (strategies.SKIPPED_OPS)"
       for op in O.all_ops() if op.meta.get("opaque") and _envelopes(op) is False},
    **{(table, op.name): "a bit operation on integers: a group computing integers stays in torch (triton/emit.INTEGERS)"
       for op in O.all_ops() if op.dtype is O.bitwise for table in (_TRITON, _NKI)},
    **{(_NKI, name): _NO_NKI for name in ("sin", "cos", "floor", "ceil", "round", "trunc", "sign")},
    (_NKI_ACT, "mish"): "no Scalar-engine function of its own; the Trainium cost model still places it there",
}


def missing_tables(op: O.OpDef) -> list[str]:
    """The tables ``op`` should be in, is not, and is not exempt from."""
    return [table for table, check in TABLES.items() if check(op) is False and (table, op.name) not in EXEMPT]


def test_every_op_is_in_every_table() -> None:
    gaps = {op.name: missing for op in O.all_ops() if (missing := missing_tables(op))}
    assert not gaps, "ops missing from interpretation tables (add an entry, or an EXEMPT reason):\n" + "\n".join(
        f"  {name}: missing from {', '.join(tables)}" for name, tables in gaps.items())


def test_exemptions_are_current() -> None:
    stale = [f"{op} in {table}: {'not a registry op' if op not in O.REGISTRY else 'covered or not applicable'}"
             for table, op in EXEMPT if table not in TABLES or op not in O.REGISTRY or TABLES[table](O.get(op)) is not False]
    assert not stale, "stale EXEMPT entries:\n" + "\n".join(f"  {s}" for s in stale)
    assert all(reason.strip() for reason in EXEMPT.values())


def test_registry_facts_are_declared_and_typed() -> None:
    base = O.get("neg")
    for meta in ({"arity": 1, "undeclared_fact": True}, {"arity": 1, "identity": "zero"}):
        with pytest.raises(ValueError, match="fact"):
            O.register(O.OpDef("_completeness_probe", base.kind, base.arity, base.shape, base.dtype, base.reference,
                               meta=meta))
    assert "_completeness_probe" not in O.REGISTRY
    for op in O.all_ops():
        assert set(op.meta) <= set(O.FACTS), op.name
