"""The discovered rule store: what it must contain, that every rule is true, tampering is refused,
unsafe directions are never handed to the νGraph, and discovery regenerates it exactly."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.rules_discovered import store
from axon_eg.rules_discovered.store import RuleStoreError, load_rules, load_stored, obligation_of
from axon_eg.semantics.prover import signed_symbols

STORED = load_stored()
BY_NAME = {s.entry["name"]: s for s in STORED}

# The identities the issue requires, by the name the enumerator gives them (found, not typed in).
REQUIRED = {
    "scalar scale through matmul, either side": ["mul_scalar_through_matmul_A", "mul_scalar_through_matmul_B"],
    "row scale through matmul": ["mul_row_through_matmul_A"],
    "column scale through matmul": ["mul_col_through_matmul_B"],
    "transpose through matmul": ["transpose_through_matmul"],
    "sum over output columns into the weights (GEMM -> GEMV)": ["sum1_keep_into_matmul_B", "sum1_into_matmul_B"],
    "element-wise through transpose / broadcast / reshape": ["exp_through_transpose2", "add_through_broadcast_rows",
                                                            "tanh_through_flatten", "mul_through_merge_batch"],
    "sum and mean over add": ["sum_through_add_same", "mean_through_add_same"],
    "exp(a) * exp(b) = exp(a + b)": ["exp_add_to_mul"],
    "softmax max-shift invariance": ["softmax_drop_max_shift"],
    "reductions over size-1 axes": ["sum_over_size1_keep", "max_over_size1"],
    "min/max with a constant through a positive scale": ["max_through_mul_scalar>0", "min_through_mul_scalar>0"],
    "inference batchnorm folded into the matmul": ["batchnorm_folded_into_matmul"],
    "matmul associativity": ["matmul_assoc"],
    "online-softmax rescaling": ["exp_online_rescale"],
}


@pytest.mark.parametrize("what", sorted(REQUIRED))
def test_required_identities_were_discovered_and_proved(what: str) -> None:
    for name in REQUIRED[what]:
        assert name in BY_NAME, f"{what}: {name} missing from the store"
        proof = BY_NAME[name].entry["proof"]
        assert proof["status"] == "proven" and proof["semantics"] == store.semantics_hash()


def test_max_shift_drop_is_flagged_and_never_applied() -> None:
    entry = BY_NAME["softmax_drop_max_shift"].entry
    assert entry["float_safe"] == {**entry["float_safe"], "forward": False, "backward": True}
    names = {r.name for r in load_rules()}
    assert "softmax_drop_max_shift" not in names  # dropping the shift: never handed to the νGraph
    assert "softmax_drop_max_shift~rev" in names  # adding it: fine


@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_every_stored_rule_holds_in_float64_on_random_shapes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    checked = 0
    for s in STORED:
        c = obligation_of(s.entry)
        names = sorted(c.lhs.free_dims | c.rhs.free_dims)
        for _ in range(4):  # sizes that fit the rule's own shape constraints
            dims = {n: int(rng.integers(1, 6)) for n in names}
            try:
                lhs, rhs = c.lhs.bind(dims), c.rhs.bind(dims)
            except Exception:  # noqa: BLE001 - e.g. a slice past the end at this size
                continue
            inputs = signed_symbols(random_inputs(lhs, seed=int(rng.integers(0, 2**31))), c.symbols)
            a, b = interpret(lhs, inputs), interpret(rhs, inputs)
            finite = np.isfinite(a) & np.isfinite(b)
            assert np.array_equal(np.isfinite(a), np.isfinite(b)), c.rule.name
            np.testing.assert_allclose(a[finite], b[finite], rtol=1e-6, atol=1e-8, err_msg=c.rule.name)
            checked += 1
            break
    assert checked >= len(STORED) * 0.95


def _copy_store(tmp_path):
    target = tmp_path / "data"
    shutil.copytree(store.DATA, target)
    return target


def _edit(path, name, edit):
    body = json.loads(path.read_text())
    for e in body["entries"]:
        if e["name"] == name:
            edit(e)
    path.write_text(json.dumps(body))


@pytest.mark.parametrize("edit, message", [
    (lambda e: e.update(rhs=e["lhs"]), "digest does not match"),
    (lambda e: e.pop("proof"), "no proof record"),
    (lambda e: e["proof"].update(semantics="0" * 64), "stale hash"),
])
def test_tampered_entries_are_refused_naming_the_rule(tmp_path, edit, message) -> None:
    data = _copy_store(tmp_path)
    _edit(data / "transpose_matmul.json", "transpose_through_matmul", edit)
    with pytest.raises(RuleStoreError, match=f"rule transpose_through_matmul in transpose_matmul.json: .*{message}"):
        store.check_entry(next(e for e, _ in store.load_entries(data) if e["name"] == "transpose_through_matmul"),
                          "transpose_matmul.json")


def test_edited_rhs_with_a_recomputed_digest_is_refuted_by_the_re_proof(tmp_path) -> None:
    """The digest is no signature; what `rules verify` re-proves is the rule text itself."""
    from axon_eg.semantics.prover import prove_equal

    data = _copy_store(tmp_path)

    def forge(e):
        e["rhs"] = "(neg (matmul (transpose :perm [1 0] ?B) (transpose :perm [1 0] ?A)))"
        e["digest"] = store.digest(e)

    _edit(data / "transpose_matmul.json", "transpose_through_matmul", forge)
    entry = next(e for e, _ in store.load_entries(data) if e["name"] == "transpose_through_matmul")
    store.check_entry(entry, "transpose_matmul.json")  # the record itself looks fine ...
    ob = obligation_of(entry)
    result = prove_equal(ob.lhs, ob.rhs, symbols=ob.symbols)
    assert result.status == "refuted" and result.counterexample is not None  # ... the re-proof is not


def test_a_rule_with_an_unpinned_attribute_is_refused_by_the_re_proof(tmp_path) -> None:
    """The old fold rule matched any reshape target: nothing proves that, so verify refuses it."""
    data = _copy_store(tmp_path)

    def widen(e):
        e["conditions"] = [c for c in e["conditions"] if not c.startswith("(= ?shape0")]
        e["digest"] = store.digest(e)

    _edit(data / "fold.json", "batchnorm_folded_into_matmul", widen)
    entry = next(e for e, _ in store.load_entries(data) if e["name"] == "batchnorm_folded_into_matmul")
    with pytest.raises(RuleStoreError, match=r"attribute \?shape0 is bound by no condition"):
        obligation_of(entry, "fold.json")


@pytest.mark.slow
def test_discovery_regenerates_the_store_exactly() -> None:
    from axon_eg.rules_discovered.driver import discover

    summary, admitted, rejected = discover(jobs=2, write_store=False)
    regenerated = {e["name"]: (e["lhs"], e["rhs"], e["conditions"], e["float_safe"]["forward"], e["float_safe"]["backward"])
                   for e in admitted}
    stored = {s.entry["name"]: (s.entry["lhs"], s.entry["rhs"], s.entry["conditions"], s.forward_safe, s.backward_safe)
              for s in STORED}
    assert regenerated == stored
    assert summary.candidates == summary.proven + summary.refuted + summary.unknown + summary.unexpressible
    assert all(r["status"] != "proven" for r in rejected if r["status"] != "unexpressible")
    refuted = [r for r in rejected if r["status"] == "refuted"]
    assert refuted and all(r["detail"] for r in refuted)  # every refutation carries its counterexample


@pytest.mark.parametrize("name", ["sum_matmul", "rmsnorm_matmul", "softmax", "linear_batchnorm", "gqa"])
def test_nugraph_with_discovered_rules_extracts_correct_variants(name: str) -> None:
    from benchmarks.suite import get

    from axon_eg.egraph.nugraph import Limits, NuGraph

    program = get(name).bound(small=True)
    graph = NuGraph(program, load_rules())
    graph.saturate(Limits(iterations=8, seconds=20))
    graph.check(seeds=(0,))
    inputs = random_inputs(program, 3)
    want = interpret(program, inputs)
    for v in graph.extract(6):
        np.testing.assert_allclose(interpret(v.program, inputs), want, rtol=1e-7, atol=1e-9)
    if name == "sum_matmul":  # the GEMM became a GEMV
        best = graph.best().program
        assert any(n.op == "matmul" and best.concrete_shape(i)[-1] == 1 for i, n in enumerate(best.nodes))
