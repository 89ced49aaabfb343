"""The Triton backend's ``lowers`` predicate (the enumerator's probe) agrees with the lowering: ``lower_group``
returns a GroupKernel exactly when ``lowers`` is True, over random programs, every fusion plan, tilings and
ISA choices; and for the groups whose ``check`` decides (element-wise, layout, attention, split-K GEMV) the
probe generates no source."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from benchmarks import suite  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton import attention, blas, elementwise, emit, gemv_splitk, layout, matmul, reduction, scan, sdpa  # noqa: E402
from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.base import GroupKernel, NotLowerable  # noqa: E402
from axon_eg.extract.candidates import enumerate_candidates, isa_choices  # noqa: E402
from axon_eg.extract.fusion import plans  # noqa: E402
from axon_eg.extract.tiling import space, tilings  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir import ops as O  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp16, fp32, fp64  # noqa: E402
from axon_eg.targets import backend_for, backend_for_hw  # noqa: E402
from axon_eg.testing.strategies import programs  # noqa: E402

HW = {name: load(name) for name in ("h200", "intel-xe2")}
EXAMPLES = int(os.environ.get("AXON_EG_TRITON_EXAMPLES", "40"))


def _agree(plan, gi, tiling, isa, warp_size) -> None:
    try:
        lowered = emit.lower_group(plan, gi, tiling, "_g", warp_size, isa)
    except Exception:  # a crashing lowering: the enumerator records the probe's error either way
        return
    assert emit.lowers(plan, gi, tiling, isa, warp_size) == isinstance(lowered, (GroupKernel, blas.Call, sdpa.Call)), (
        plan.name, gi, plan.groups[gi].kind, tiling and tiling.values, isa, lowered if isinstance(lowered, str) else "")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_nodes=6, dtypes=(bf16, fp16, fp32, fp64), allow_library=True, sizes=(1, 2, 3, 7, 16, 32)),
       st.sampled_from(sorted(HW)), st.data())
def test_lowers_agrees_with_lower_group(program, hw_name, data):
    hw = HW[hw_name]
    found = list(plans(program))
    for plan in data.draw(st.lists(st.sampled_from(found), min_size=1, max_size=3, unique_by=lambda p: p.name)):
        isas = sorted({dict(c).get(gi) for c in isa_choices(plan, hw, TRITON) for gi in range(len(plan.groups))} | {None},
                      key=str)
        others = [t for gj in range(len(plan.groups)) for t in tilings(space(plan, gj, hw, TRITON.templates))[0][:2]]
        for gi in range(len(plan.groups)):
            own = tilings(space(plan, gi, hw, TRITON.templates))[0]
            options = [None, *own[:3], *own[-1:], *(data.draw(st.sampled_from(others)) for _ in range(1) if others)]
            for tiling in options:
                for isa in (*isas, "tl.dot", "fma_reduce"):
                    _agree(plan, gi, tiling, isa, data.draw(st.sampled_from((None, 16, 32))))


def test_a_transpose_another_group_materialises_is_n_major():
    """Found by the property above: ``x @ transpose(w)`` with the transpose in a layout group of its own reads
    a materialised buffer with N contiguous, so a persistent ``/3xtf32`` matmul has no transposed copy to
    serve it, and ``lowers`` must say so without building the kernel."""
    from axon_eg.ir.program import Builder

    b = Builder("t")
    x = b.input("x", (1, 2), fp32)
    w = b.input("w", (16, 2), bf16)
    program = b.build([b.emit("matmul", x, b.emit("transpose", w, perm=(1, 0)))])
    split = [p for p in plans(program) if len(p.groups) == 2]
    assert split
    for plan in split:
        for isa in ("tl.dot+tma+persistent/3xtf32", "tl.dot/3xtf32", "tl.dot+tma/3xtf32"):
            _agree(plan, 1, None, isa, None)
        assert not emit.lowers(plan, 1, None, "tl.dot+tma+persistent/3xtf32", None)


@pytest.mark.parametrize("name", [e.name for e in suite.SUITE])
def test_lowers_agrees_on_the_suite(name):
    """Every plan, tiling and ISA choice of the suite programs (CI sizes) on the H200."""
    hw = HW["h200"]
    program = suite.get(name).bound(small=True)
    for plan in [*plans(program), *(d for p in plans(program) for d in TRITON.derived_plans(p))]:
        isas = sorted({dict(c).get(gi) for c in isa_choices(plan, hw, TRITON) for gi in range(len(plan.groups))} | {None},
                      key=str)
        for gi in range(len(plan.groups)):
            for tiling in [None, *tilings(space(plan, gi, hw, TRITON.templates))[0][:4]]:
                for isa in isas:
                    _agree(plan, gi, tiling, isa, 32)


def test_the_probe_does_not_emit_source_where_check_decides(monkeypatch):
    """Enumerating element-wise and attention programs never calls those lowerings (nor the layout and
    split-K GEMV ones); a row reduction's or tl.dot matmul's probe still lowers it (their index analysis
    builds the expressions)."""
    calls: list[str] = []
    for module in (elementwise, layout, attention, gemv_splitk, matmul, reduction, scan):
        real, short = module.lower, module.__name__.rsplit(".", 1)[-1]

        def counting(*args, _real=real, _name=short, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "lower", counting)
    from axon_eg.egraph.nugraph import Limits, NuGraph

    hw = HW["h200"]
    backend = backend_for_hw(hw)
    assert backend is backend_for("triton") and backend.name == "triton"
    for name in ("silu", "gelu_mul", "add", "gqa"):
        g = NuGraph(suite.get(name).bound(small=True), ())
        g.saturate(Limits(seconds=0.3))
        found, _ = enumerate_candidates(g, hw, 4, backend=backend, fallback=backend.fallback(hw))
        assert found
        if name != "gqa":  # element-wise only: nothing is lowered
            assert calls == [], (name, calls)
    # gqa's plans also split attention into matmul and row-reduction groups: the row reductions are decided
    # without source too; only matmuls with row statistics or reductions around them are still lowered
    assert not {"elementwise", "layout", "attention", "gemv_splitk", "reduction"} & set(calls), calls


def test_nki_backend_lowers_every_group_and_has_no_torch_fallback():
    trn2 = load("trn2")
    backend = backend_for_hw(trn2)
    assert backend.name == "nki" and backend.fallback(trn2) is None and not backend.torch_baselines
    assert backend_for("nki") is backend and not backend.accepts(HW["h200"])


def _decides(plan, gi, tiling, isa, warp_size):
    """``check``'s verdict: True, the NotLowerable reason, or False (only lowering tells)."""
    try:
        return emit.LOWERINGS[plan.groups[gi].kind].check(plan, gi, tiling, warp_size, isa)
    except NotLowerable as exc:
        return str(exc)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_nodes=6, dtypes=(bf16, fp16, fp32, fp64), allow_library=True, sizes=(1, 2, 3, 7, 16, 32)),
       st.sampled_from(sorted(HW)), st.data())
def test_check_decides_like_the_lowering(program, hw_name, data):
    """Where a row reduction's, scan's or matmul's ``check`` decides, the lowering agrees: True only where
    it returns a GroupKernel, a refusal with the lowering's own reason."""
    hw = HW[hw_name]
    for plan in plans(program):
        for gi, group in enumerate(plan.groups):
            if group.kind not in ("reduction", "scan", "matmul"):
                continue
            own = tilings(space(plan, gi, hw, TRITON.templates))[0]
            for tiling in [None, *own[:2], *own[-1:]]:
                for isa in (None, "tl.dot", "tl.dot+tma", "fma_reduce"):
                    warp_size = data.draw(st.sampled_from((None, 16, 32)))
                    try:
                        lowered = emit.lower_group(plan, gi, tiling, "_g", warp_size, isa)
                    except Exception:  # a crashing lowering: the probe records the error either way
                        continue
                    verdict = _decides(plan, gi, tiling, isa, warp_size)
                    if verdict is True:
                        assert isinstance(lowered, GroupKernel), (plan.name, gi, isa, lowered)
                    elif verdict is not False:
                        assert verdict == lowered, (plan.name, gi, isa, verdict, lowered)


@pytest.mark.parametrize("name", [e.name for e in suite.SUITE])
def test_scans_and_plain_matmuls_are_decided_without_source(name):
    """On the suite, ``check`` decides every scan group and every matmul group without a reduction (layout
    prologues, element-wise epilogues, regrouping views, TMA's fit): the probe never lowers them."""
    hw = HW["h200"]
    program = suite.get(name).bound(small=True)
    for plan in plans(program):
        for gi, group in enumerate(plan.groups):
            ops = {plan.program.nodes[n].op for n in group.nodes}
            plain = group.kind == "matmul" and not any(
                O.get(op).kind is O.OpKind.REDUCE for op in ops)
            if group.kind != "scan" and not plain:
                continue
            for tiling in [None, *tilings(space(plan, gi, hw, TRITON.templates))[0][:4]]:
                for isa in (None, "tl.dot", "tl.dot+tma", "fma_reduce"):
                    assert _decides(plan, gi, tiling, isa, 32) is not False, (name, plan.name, gi, isa)
