"""Convolution folds: a per-output-channel scale moved into a conv's weight (``scale_conv``) and inference
batchnorm / a per-channel affine map folded into a conv's weight and bias (``fold``), for conv1d/2d/3d with
and without a bias. The stored rules leave stride, padding, dilation and groups free (any value the νGraph
can match), and their proofs are symbolic in them; the νGraph folds real convolutions (3x3 with padding 1,
stride 2, depthwise) and its variants agree with the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.egraph.nugraph import Limits, NuGraph
from axon_eg.egraph.patterns import parse_rule, walk
from axon_eg.ir.builder import Builder
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.rules_discovered import store
from axon_eg.rules_discovered.instantiate import instantiate, symbolic_attributes
from axon_eg.rules_discovered.store import load_rules, load_stored
from axon_eg.semantics.op_semantics import attribute_dims
from axon_eg.semantics.prover import prove_equal
from axon_eg.testing.rules import NoMatch, compare, draw_match

STORED = {s.entry["name"]: s for s in load_stored()}
RULES = load_rules()
CONV_RULES = [r for r in RULES if any(getattr(p, "op", "").startswith("conv") for p in walk(r.lhs))]
ATTRS = {"stride", "padding", "dilation", "groups"}

EXPECTED = [f"{op}_{s}_into_conv{n}d" for op in ("mul", "div") for s in ("scalar", "channel", "channel_lead")
            for n in (1, 2, 3)]
EXPECTED += [f"{what}_folded_into_{b}conv{n}d" for n in (1, 2, 3)
             for what, b in (("batchnorm", ""), ("batchnorm", "biased_"), ("affine", "biased_"))]


@pytest.mark.parametrize("name", EXPECTED)
def test_conv_rules_are_stored_proved_and_free_in_every_attribute(name: str) -> None:
    assert name in STORED, f"{name} missing from the store"
    entry = STORED[name].entry
    assert entry["family"] == ("fold" if "_folded_" in name else "scale_conv")
    assert entry["proof"]["status"] == "proven" and entry["proof"]["semantics"] == store.semantics_hash()
    assert STORED[name].forward_safe  # folding (left to right) is what inference needs
    rule = parse_rule(name, entry["lhs"], entry["rhs"], entry["conditions"])
    free = symbolic_attributes(rule)
    assert {attr for _, attr in free.values()} == ATTRS  # no condition pins a conv attribute: any value matches
    assert not any(c.startswith(("(= ?stride", "(= ?padding", "(= ?dilation", "(= ?groups")) for c in entry["conditions"])
    ob = instantiate(rule)  # the obligation proved is symbolic in them
    n = int(name[-2])
    assert len(attribute_dims(ob.lhs.free_dims)) == 3 * n + 1


def test_the_folded_forms_are_one_conv_and_at_most_one_add() -> None:
    for name in EXPECTED:
        if "folded" not in name:
            continue
        rhs = parse_rule(name, STORED[name].entry["lhs"], STORED[name].entry["rhs"], STORED[name].entry["conditions"]).rhs
        convs = [p for p in walk(rhs) if getattr(p, "op", "").startswith("conv")]
        assert len(convs) == 1 and rhs.op == "add" and any(a is convs[0] for a in rhs.args), name
        assert not any(getattr(p, "op", "") == "rsqrt" for p in walk(convs[0].args[0])), name  # not on the activation


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_conv_rules_hold_on_random_concrete_matches(seed: int) -> None:
    """Any stride (1..3), padding (0..2 or what the kernel needs), dilation, groups, sizes 1 and odd."""
    rng = np.random.default_rng(seed)
    attrs_seen = set()
    for rule in CONV_RULES:
        for k in range(2):
            match = draw_match(rule, rng)
            why = compare(match, seed + k)
            assert why is None, f"{rule.name}: {why}"
            attrs_seen.add((match.binding.attrs["groups"] > 1, any(p > 0 for p in match.binding.attrs["padding"])))
    assert len(attrs_seen) >= 3


PAD0_ONLY = parse_rule(  # conv(x + t, w) = conv(x, w) + t * sum(w): true without padding only
    "shift_through_conv2d",
    "(conv2d :stride ?stride :padding ?padding :dilation ?dilation :groups ?groups (add ?x ?t) ?w)",
    "(add (conv2d :stride ?stride :padding ?padding :dilation ?dilation :groups ?groups ?x ?w) "
    "(mul (squeeze :axes [3] (sum :axes [1 2 3] :keepdims true ?w)) ?t))",
    ["(= (rank ?x) 4)", "(= (rank ?w) 4)", "(= (rank ?t) 0)", "(= (dim ?x 1) (* (dim ?w 1) ?groups))"])


def test_a_rule_true_only_without_padding_is_refuted_and_caught_by_the_instances() -> None:
    ob = instantiate(PAD0_ONLY)
    result = prove_equal(ob.lhs, ob.rhs, symbols=ob.symbols)
    assert result.status == "refuted" and "attr_padding" in str(result.counterexample)
    rng = np.random.default_rng(0)
    failures = []
    for k in range(40):
        try:
            match = draw_match(PAD0_ONLY, rng)
        except NoMatch:
            continue
        if (why := compare(match, k)) is not None:
            failures.append(why)
    assert failures and all("padding" in f for f in failures)


def _bn_after_conv(n: int, c: int, o: int, size: int, biased: bool, **conv):
    b = Builder(f"bn_conv{n}d")
    x = b.input("x", (2, c, *(size,) * n), "fp32")
    w = b.input("w", (o, c // conv.get("groups", 1), *(3,) * n), "fp32")
    stats = [b.input(s, (o,), "fp32") for s in ("mean", "var", "gamma", "beta")]
    y = b.emit(f"conv{n}d", x, w, *([b.input("b", (o,), "fp32")] if biased else []), **conv)
    return b.build(b.emit("relu", b.emit("batchnorm", y, *stats, axis=1))).expand()


@pytest.mark.parametrize("n, c, o, biased, conv", [
    (2, 3, 16, False, {"padding": 1}),  # the torchvision stem's 3x3
    (2, 8, 8, True, {"stride": 2, "padding": 1}),  # downsampling
    (2, 8, 8, False, {"padding": 1, "groups": 8}),  # depthwise
    (1, 4, 6, True, {"dilation": 2, "padding": 2}),
    (3, 2, 4, False, {"padding": (1, 0, 1), "stride": (1, 2, 1)}),
])
def test_the_nugraph_folds_batchnorm_into_real_convolutions(n, c, o, biased, conv) -> None:
    """The activation is larger than the weight here: the folded form (a scaled weight, the statistics
    only in a per-channel bias) is the νGraph's cheapest variant, and no variant is wrong."""
    program = _bn_after_conv(n, c, o, 16 if n == 2 else 7, biased, **conv)
    graph = NuGraph(program, RULES)
    graph.saturate(Limits(iterations=8, seconds=20))
    graph.check(seeds=(0,))  # every e-node agrees with its class in float64
    rule = f"batchnorm_folded_into_{'biased_' if biased else ''}conv{n}d"
    assert graph.report.matches_per_rule.get(rule, 0) > 0
    variants = graph.extract(4)
    prog = variants[0].program
    conv_node = next(nd for nd in prog.nodes if nd.op == f"conv{n}d")
    assert prog.nodes[conv_node.inputs[1]].op == "mul"  # the weight is scaled ...
    assert not any(nd.op == "rsqrt" and len(nd.shape) == n + 2 and nd.shape[0] == 2 for nd in prog.nodes)
    inputs = random_inputs(program, 0)  # ... and every variant is the block
    inputs["var"] = np.abs(inputs["var"]) + 0.5
    want = interpret(program, inputs)
    for v in variants:
        np.testing.assert_allclose(interpret(v.program, inputs), want, rtol=1e-7, atol=1e-9, err_msg=str(v.rules))
