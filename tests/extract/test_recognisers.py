"""The recognisers (``extract/recognisers.py``): patterns of the rule language matched by one matcher
(``egraph/patterns.match_node``) over a fusion group's nodes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.egraph.patterns import App, match_node, parse_pattern
from axon_eg.extract.fusion import REDUCTION, FusionPlan, Group
from axon_eg.extract.recognisers import RECOGNISERS, recognise
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder
from axon_eg.ir.dtypes import fp32

sizes = st.sampled_from((1, 2, 3, 7, 16, 33))
AXES = ((0,), (1,), (0, 1))


def _group(program) -> FusionPlan:
    nodes = tuple(i for i, n in enumerate(program.nodes) if n.op not in ("input", "constant"))
    return FusionPlan(program, (Group(REDUCTION, nodes),))


def test_every_recogniser_is_written_in_registered_ops() -> None:
    for name, patterns in RECOGNISERS.items():
        assert patterns, name
        for p in patterns:
            ops = [q.op for q in _apps(p)]
            assert ops and all(op in O.REGISTRY for op in ops), (name, ops)


def _apps(p):
    if isinstance(p, App):
        yield p
        for a in p.args:
            yield from _apps(a)


@settings(max_examples=60, deadline=None)
@given(r=sizes, c=sizes, mean_axes=st.sampled_from(AXES), dev_axes=st.sampled_from(AXES),
       same_x=st.booleans(), form=st.sampled_from(("square", "mul", "mul_other")), outer=st.sampled_from(("mean", "sum")))
def test_welford_pairs_are_exactly_a_deviation_of_the_same_tensor_over_the_same_axes(
        r, c, mean_axes, dev_axes, same_x, form, outer):
    b = Builder("var")
    x = b.input("x", (r, c), fp32)
    y = b.input("y", (r, c), fp32)
    m = b.emit("mean", x, axes=mean_axes, keepdims=True)
    d = b.emit("sub", x if same_x else y, m)
    q = b.emit("square", d) if form == "square" else b.emit("mul", d, d if form == "mul" else x)
    s = b.emit(outer, q, axes=dev_axes, keepdims=True)
    program = b.build([m, s])
    plan = _group(program)
    want = same_x and mean_axes == dev_axes and form != "mul_other"
    pairs = plan.welford_pairs(0)
    assert pairs == ([(program.outputs[0], program.outputs[1])] if want else []), (pairs, want)


@settings(max_examples=40, deadline=None)
@given(m=sizes, k=sizes, n=sizes, op=st.sampled_from(("sum", "mean", "max")), keepdims=st.booleans())
def test_the_gemv_of_a_sum_is_recognised_only_for_a_kept_sum_or_mean(m, k, n, op, keepdims):
    b = Builder("gemv")
    x = b.input("x", (m, k), fp32)
    w = b.input("w", (k, n), fp32)
    red = b.emit(op, w, axes=(1,), keepdims=True)
    vec = red if keepdims else b.emit("expand_dims", b.emit(op, w, axes=(1,), keepdims=False), axis=1)
    out = b.emit("matmul", x, vec)
    program = b.build([out])
    inside = {i for i, nd in enumerate(program.nodes) if nd.op not in ("input", "constant")}
    got = recognise("gemv_of_sum", program, program.outputs[0], inside=inside)
    assert bool(got) == (op in ("sum", "mean") and keepdims)
    if got:
        assert program.nodes[got.nodes["x"]].op == "input" and got.attrs["axes"] == (1,)


def test_a_mismatch_names_the_node_and_what_was_expected() -> None:
    b = Builder("p")
    x = b.input("x", (4, 5), fp32)
    e = b.emit("exp", x)
    program = b.build([b.emit("add", e, e)])
    top = program.outputs[0]
    exp = program.nodes[top].inputs[0]
    got = match_node(parse_pattern("(mul ?a ?a)"), program, top)
    assert not got and got.why == f"expected mul, found add (node {top})"
    inner = match_node(parse_pattern("(add (exp ?x) (exp ?x))"), program, top, inside={top})
    assert not inner and "outside the group" in inner.why
    whole = match_node(parse_pattern("(add ?a ?a)"), program, top)
    assert whole and whole.nodes == {"a": exp} and whole.matched == {top}
    assert match_node(parse_pattern("(add (exp ?x) (exp ?x))"), program, top).matched == {top, exp}
