"""Issue 51, deliverable 1c: weights that are parameters (constant in inference) pre-transformed once, not per
call, where the caller froze them (``Program.frozen()``, the backend's ``freeze`` option: no writes through
``.data``, which the version counter does not see). ``FusionPlan.static_groups`` names the groups of the frozen
inputs alone (every value they read comes from a ``frozen`` input or a constant, through views and other such
groups, and they write no program output; plain ``parameter`` / ``buffer`` inputs never make one); the Triton
cost model charges them nothing; the launcher computes them on the first call and again only when a tensor
they read is another tensor or was changed in place (``_version``), restoring their buffers from the kernel
file's ``_STATIC`` otherwise. End to end on the RMSNorm -> Linear block, whose gain-folded
variant scales the weight by the norm's gain (``mul(transpose(W), expand_dims(g))``, parameters alone), on the
CPU (Triton interpreter), against float64."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # kernels run here, on the CPU

import dataclasses
import sys
from pathlib import Path

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.cost import gpu_cost, memo_group_cost  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.extract.fusion import FusionPlan, plans  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import fp32  # noqa: E402
from axon_eg.ir.program import Program  # noqa: E402
from axon_eg.testing.kernels import candidate_for, load_kernel  # noqa: E402
from axon_eg.testing.strategies import programs  # noqa: E402

os.environ["AXON_EG_FORCE_CPU"] = "1"

H200 = load("h200")


def _folded(tokens: int = 7, hidden: int = 16, out: int = 8) -> Program:
    """``(x * r) @ (W^T * g[:, None])`` with r the RMS statistic: the gain-folded RMSNorm -> Linear, W and g
    parameters."""
    b = Builder("folded_norm_linear")
    x = b.input("x", (1, tokens, hidden), fp32)
    g = b.input("g", (hidden,), fp32)
    w = b.input("w", (out, hidden), fp32)
    ms = b.emit("mean", b.emit("square", x), axes=(2,), keepdims=True)
    r = b.emit("rsqrt", b.emit("add", ms, b.constant(1e-6, fp32)))
    scaled = b.emit("mul", b.emit("transpose", w, perm=(1, 0)), b.emit("expand_dims", g, axis=1))
    y = b.emit("matmul", b.emit("mul", x, r), scaled)
    return b.build(y, roles={"g": "frozen", "w": "frozen"})


def _static_of(plan: FusionPlan) -> set[int]:
    """The groups whose nodes are all of the parameters (no node reads ``x``)."""
    program = plan.program
    x = next(i for i, n in enumerate(program.nodes) if n.is_input and n.attrs["name"] == "x")
    tainted = {x}
    for i, n in enumerate(program.nodes):
        if any(j in tainted for j in n.inputs):
            tainted.add(i)
    return {gi for gi, g in enumerate(plan.groups) if not set(g.nodes) & tainted}


def test_the_weight_transform_is_static_and_the_activation_is_not() -> None:
    program = _folded()
    every = plans(program)
    for plan in every:
        static = plan.static_groups()
        assert static == _static_of(plan), (plan.name, static)
        for gi in static:  # never a user input, never a program output
            assert not set(plan.groups[gi].nodes) & set(program.outputs)
    assert plans(program)[0].static_groups()  # unfused: the scaled weight is a group of its own
    assert not every[-1].static_groups()  # greedy: the weight's scaling is the GEMM's prologue
    # without the roles nothing is static, nor with parameters that were not frozen
    for roles in ((), (("g", "parameter"), ("w", "parameter"))):
        plain = dataclasses.replace(program, roles=roles)
        assert all(not plan.static_groups() for plan in plans(plain))


def test_a_group_writing_a_program_output_is_not_static() -> None:
    b = Builder("two_outputs")
    x = b.input("x", (4, 8), fp32)
    w = b.input("w", (6, 8), fp32)
    scaled = b.emit("mul", w, b.constant(2.0, fp32))  # of the parameter alone, but an output of the program
    y = b.emit("matmul", x, b.emit("transpose", scaled, perm=(1, 0)))
    program = b.build([y, scaled], roles={"w": "frozen"})
    for plan in plans(program):
        owner = plan.group_of()
        assert owner[_node_of(program, "mul")] not in plan.static_groups()
        assert owner[_node_of(program, "matmul")] not in plan.static_groups()


def _node_of(program: Program, op: str) -> int:
    return next(i for i, n in enumerate(program.nodes) if n.op == op)


def _oracle(plan: FusionPlan) -> set[int]:
    """Static groups by their ancestors: group ``gi`` and every group it depends on, directly or not, write no
    program output, read no user input and each reach a parameter."""
    program = plan.program
    roles = dict(program.roles)
    owner = plan.group_of()
    outputs = set(program.outputs)

    def ancestors(nodes: set[int]) -> set[int]:
        seen, stack = set(), [j for n in nodes for j in program.nodes[n].inputs if j not in nodes]
        while stack:
            j = stack.pop()
            if j not in seen:
                seen.add(j)
                stack.extend(program.nodes[j].inputs)
        return seen

    def alone(gi: int) -> bool:
        up = ancestors(set(plan.groups[gi].nodes))
        ins = [roles.get(program.nodes[j].attrs["name"], "input") for j in up if program.nodes[j].is_input]
        return (not set(plan.groups[gi].nodes) & outputs and "input" not in ins
                and any(r == "frozen" for r in ins))

    out = set()
    for gi, g in enumerate(plan.groups):
        up = ancestors(set(g.nodes))
        groups = {owner[j] for j in up if j in owner} | {gi}
        if all(alone(h) for h in groups):
            out.add(gi)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs(max_nodes=7, symbolic=False), st.data())
def test_static_groups_are_those_of_the_frozen_inputs_alone(program: Program, data: st.DataObject) -> None:
    names = [s.name for s in program.inputs]
    marked = data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([]))
    role = data.draw(st.sampled_from(["parameter", "buffer", "frozen"]))
    program = dataclasses.replace(program, roles=tuple(sorted((n, role) for n in marked)))
    for plan in plans(program):
        assert set(plan.static_groups()) == _oracle(plan), (str(program), plan.name)


def test_the_cost_model_charges_a_static_group_nothing() -> None:
    program = _folded()
    candidate = candidate_for(program, H200, plan_index=0)
    plan = candidate.plan
    static = plan.static_groups()
    assert static
    report = gpu_cost(plan, candidate.tilings, H200)
    assert len(report.groups) == len(plan.groups)  # every group keeps its entry
    for gi in static:
        assert report.groups[gi].seconds == 0.0 and report.groups[gi].group == gi
        assert memo_group_cost(plan, gi, candidate.tilings[gi], H200, None, None, False).seconds > 0  # alone: not free
    assert report.seconds == pytest.approx(sum(g.seconds for gi, g in enumerate(report.groups) if gi not in static))
    assert TRITON.cost(plan, candidate.tilings, H200).seconds == report.seconds
    plain = dataclasses.replace(plan, program=dataclasses.replace(plan.program, roles=()))
    assert gpu_cost(plain, candidate.tilings, H200).seconds > report.seconds


def _reference(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x, g, w = x.double(), g.double(), w.double()
    return (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g) @ w.T


def _check_calls(entry, x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, out_shape, order: list[str]) -> None:
    """(a) two calls with the same tensors, (b) after the weight changed in place, (c) with a new weight:
    each against float64. ``order`` names the kernel's arguments (x, g, w in some order)."""
    def call(**tensors: torch.Tensor) -> torch.Tensor:
        out = torch.empty(out_shape, dtype=torch.float32)
        entry(*(tensors[n] for n in order), out)
        return out

    def close(got: torch.Tensor, gg: torch.Tensor, ww: torch.Tensor) -> None:
        want = _reference(x, gg, ww)
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))

    close(call(x=x, g=g, w=w), g, w)
    close(call(x=x, g=g, w=w), g, w)  # the cached weight
    w.mul_(2)  # in place: the same tensor, a new version
    close(call(x=x, g=g, w=w), g, w)
    g.add_(0.25)
    close(call(x=x, g=g, w=w), g, w)
    w2 = torch.randn_like(w)  # another tensor
    close(call(x=x, g=g, w=w2), g, w2)
    close(call(x=x, g=g, w=w), g, w)  # back to the first: recomputed, not the second's


@pytest.mark.parametrize("plan_index", range(len(plans(_folded()))))
def test_the_folded_kernel_computes_the_weight_once_per_version(plan_index: int, tmp_path) -> None:
    program = _folded()
    candidate = candidate_for(program, H200, plan_index=plan_index)
    if not candidate.plan.static_groups():
        pytest.skip(f"plan {candidate.plan.name} fuses the weight's scaling into the GEMM")
    kernel = emit(candidate, H200, f"static{plan_index}")
    assert "_STATIC: dict = {}" in kernel.source and "_version" in kernel.source
    entry = load_kernel(kernel, tmp_path)
    module = sys.modules[entry.__module__]
    torch.manual_seed(0)
    x, g, w = torch.randn(1, 7, 16), torch.rand(16) + 0.5, torch.randn(8, 16)
    _check_calls(entry, x, g, w, (1, 7, 8), [s.name for s in program.inputs])
    assert module._STATIC["v"][0][0][0] is g or module._STATIC["v"][0][1][0] is g  # holds the parameters themselves


def test_the_static_block_is_skipped_when_the_parameters_are_unchanged(tmp_path) -> None:
    """A hit runs none of the static groups' lines: the weight's transform runs once over three calls."""
    program = _folded()
    candidate = candidate_for(program, H200, plan_index=0)
    kernel = emit(candidate, H200, "static_count")
    entry = load_kernel(kernel, tmp_path)
    module = sys.modules[entry.__module__]
    static = sorted(candidate.plan.static_groups())
    names = [n for n in dir(module) if any(n.startswith(f"_g{gi}_") for gi in static)]
    assert names, kernel.source
    counts = {n: 0 for n in names}

    class Counting:
        def __init__(self, name: str, fn) -> None:
            self.name, self.fn = name, fn

        def __getitem__(self, grid):
            counts[self.name] += 1
            return self.fn[grid]

        def __call__(self, *a, **k):
            counts[self.name] += 1
            return self.fn(*a, **k)

    for n in names:
        setattr(module, n, Counting(n, getattr(module, n)))
    x, g, w = torch.randn(1, 7, 16), torch.rand(16) + 0.5, torch.randn(8, 16)
    args = {"x": x, "g": g, "w": w}
    for _ in range(3):
        entry(*(args[s.name] for s in program.inputs), torch.empty(1, 7, 8))
    assert set(counts.values()) == {1}, counts
    w.mul_(0.5)
    entry(*(args[s.name] for s in program.inputs), torch.empty(1, 7, 8))
    assert set(counts.values()) == {2}, counts


def test_no_static_group_no_cache(tmp_path) -> None:
    """A program without parameters: the launcher as before (no ``_STATIC``)."""
    program = dataclasses.replace(_folded(), roles=())
    kernel = emit(candidate_for(program, H200, plan_index=0), H200, "plain")
    assert "_STATIC" not in kernel.source and "_version" not in kernel.source


def test_the_norm_linear_module_end_to_end(tmp_path) -> None:
    """The RMSNorm -> Linear module through ``ax.from_torch``, the νGraph and the enumerator: a candidate whose
    plan has a static group (the gain-folded weight, or the transposed weight), emitted and run three ways."""
    from axon_eg.egraph.nugraph import Limits, NuGraph
    from axon_eg.extract.candidates import enumerate_all
    from axon_eg.rules_discovered.store import load_rules
    from axon_eg.targets import backend_for_hw

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "egraph"))
    from test_norm_fold import NormLinear, _gain_folded

    torch.manual_seed(0)
    module = NormLinear(16, 8).eval()
    x = torch.randn(1, 7, 16)
    program = ax.from_torch(module, (x,)).frozen()
    assert {r for _, r in program.roles} == {"frozen"}
    graph = NuGraph(program, load_rules())
    graph.saturate(Limits(iterations=12, seconds=20))
    ranked, _ = enumerate_all(graph, H200, 16, backend=backend_for_hw(H200))
    with_static = [c for c in ranked if c.plan.static_groups()]
    assert with_static
    folded = [c for c in with_static if _gain_folded(c.variant.program)]
    assert folded  # the gain-folded weight, computed once
    candidate = folded[0]
    assert "broadcast_mul_k_through_matmul" in candidate.variant.rules
    kernel = emit(candidate, H200, "norm_linear_static")
    entry = load_kernel(kernel, tmp_path)
    names = {"x": "x", "norm.weight": "g", "proj.weight": "w"}
    order = [names[s.name] for s in candidate.plan.program.inputs]
    g = module.norm.weight.detach().clone()
    w = module.proj.weight.detach().clone()
    _check_calls(entry, x, g, w, (1, 7, 8), order)
