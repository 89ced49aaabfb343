"""Attention groups (the expanded ``sdpa``) lower to one flash-attention Triton kernel that matches the
float64 reference under TRITON_INTERPRET=1: the suite's gqa program, multi-head attention, causal
masks (any diagonal and fill), additive masks, bf16 / fp16 / fp32, head dims 16 to 128, sizes that are
not multiples of the blocks; groups that deviate from the pattern stay in torch and say why."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402
import re  # noqa: E402

import pytest  # noqa: E402
from benchmarks import suite  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton import attention, attention_match  # noqa: E402
from axon_eg.backends.triton.base import GroupKernel  # noqa: E402
from axon_eg.backends.triton.emit import emit, lower_group  # noqa: E402
from axon_eg.bundle import limits  # noqa: E402
from axon_eg.extract.fusion import ATTENTION, plans  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp16, fp32, fp64  # noqa: E402
from axon_eg.ir.program import Program  # noqa: E402
from axon_eg.rules_discovered.store import load_entries  # noqa: E402
from axon_eg.testing.kernels import candidate_for, run_kernel  # noqa: E402

H200 = load("h200")
SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}




# -- programs -----------------------------------------------------------------------------------
def sdpa_program(b: int = 1, hq: int = 2, hkv: int = 2, s: int = 5, t: int = 5, d: int = 16, dtype=bf16,
                 causal: bool = False, mask: tuple[int, ...] | None = None, lead: int = 2,
                 scale: float | None = None) -> Program:
    """``ax.sdpa`` on q [B, Hq, S, D], k and v [B, Hkv, T, D] (``lead`` of the two leading dims kept)."""
    bl = Builder("attention")
    heads = (b, hq)[2 - lead:]
    kv_heads = (b, hkv)[2 - lead:]
    ins = [bl.input("q", (*heads, s, d), dtype), bl.input("k", (*kv_heads, t, d), dtype),
           bl.input("v", (*kv_heads, t, d), dtype)]
    if mask is not None:
        ins.append(bl.input("mask", mask, dtype))
    return bl.build(bl.emit("sdpa", *ins, scale=scale, causal=causal))


def written_out_attention(s: int = 9, t: int = 21, d: int = 16, dtype=fp32, scale: float | None = 0.3,
                          diagonal: int | None = None, fill: float = -math.inf, shifted: bool = True) -> Program:
    """The expanded pattern written with primitives: optional scale, any causal_mask, the softmax with or
    without its max shift."""
    bl = Builder("attention_by_hand")
    q, k, v = (bl.input(n, (2, rows, d), dtype) for n, rows in (("q", s), ("k", t), ("v", t)))
    x = bl.emit("matmul", q, bl.emit("transpose", k, perm=(0, 2, 1)))
    if scale is not None:
        x = bl.emit("mul", x, bl.constant(scale, dtype))
    if diagonal is not None:
        x = bl.emit("causal_mask", x, diagonal=diagonal, fill=fill)
    if shifted:
        x = bl.emit("sub", x, bl.emit("max", x, axes=(2,), keepdims=True))
    e = bl.emit("exp", x)
    return bl.build(bl.emit("matmul", bl.emit("div", e, bl.emit("sum", e, axes=(2,), keepdims=True)), v))


def lowered(program: Program, isa: str | None = None, **overrides):
    choice = ((0, isa),) if isa else ()
    return emit(candidate_for(program, H200, -1, {**SMALL, **overrides}, isa=choice), H200, "k")


def check(program: Program, tmp_path, isa: str | None = None, **overrides):
    kernel = lowered(program, isa, **overrides)
    assert kernel.meta["lowering"] == "triton:1", kernel.source
    out = run_kernel(kernel, program.expand(), tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
    return kernel


def attention_group(program: Program):
    plan = plans(program.expand())[-1]
    (gi,) = [gi for gi, g in enumerate(plan.groups) if g.kind == ATTENTION]
    return plan, gi


# -- the suite's gqa program ----------------------------------------------------------------------
def test_suite_gqa_is_one_flash_attention_kernel(tmp_path):
    kernel = check(suite.get("gqa").bound(small=True), tmp_path)
    assert "k_base = p1 + (bh // 2) * 640" in kernel.source  # kv head = query head // G, read in place
    assert "exp_online_rescale" in kernel.source and "online softmax by exp_online_rescale" in kernel.source


@pytest.mark.parametrize("sizes,blocks", [({"B": 1, "Hkv": 2, "G": 3, "S": 37}, (32, 16)),
                                          ({"B": 2, "Hkv": 1, "G": 4, "S": 19}, (16, 32))])
def test_suite_gqa_at_sizes_that_are_not_multiples_of_the_blocks(sizes, blocks, tmp_path):
    kernel = check(suite.get("gqa").program.bind(sizes), tmp_path, BLOCK_M=blocks[0], BLOCK_N=blocks[1])
    assert f"mask=cols[:, None] < {sizes['S']}" in kernel.source


def test_suite_gqa_at_h200_sizes_launches_within_the_limits():
    program = suite.get("gqa").bound(small=False)
    kernel = lowered(program, BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    b, hkv, g, s = (suite.get("gqa").sizes[k] for k in ("B", "Hkv", "G", "S"))
    res = kernel.resources
    assert res["grid"] == b * hkv * g * s // 128
    assert res["smem_bytes"] == 2 * (128 * 128 + 3 * 64 * (128 + 128) + 128 * 64) <= limits(H200)["smem_bytes"]
    assert res["threads"] == 256 and res["block_elems"] <= limits(H200)["block_elems"]
    assert "num_stages=3" in kernel.source and "HEAD_D=128" in kernel.source
    assert "mask=" not in kernel.source.split("def kernel")[0]  # S = 2048: no row, key or head-dim masks


@pytest.mark.parametrize("sizes", [{"B": 1, "Hkv": 2, "G": 2, "S": 32}, {"B": 2, "Hkv": 1, "G": 3, "S": 48}], ids=str)
def test_suite_gqa_with_tma_descriptor_loads(sizes, tmp_path):
    """Hopper: q, k, v tiles through tensor descriptors made per program (k and v at the shared kv head)."""
    kernel = check(suite.get("gqa").program.bind(sizes), tmp_path, isa="tl.dot+tma")
    src = kernel.source
    assert src.count("tl.make_tensor_descriptor(") == 3 and "triton.set_allocator(_tma_scratch)" in src
    assert "dk.load([start_n, 0])" in src and "dq.load([start_m * BLOCK_M, 0])" in src
    assert "q/k/v tiles by TMA" in src[: src.index("import math")]


@pytest.mark.parametrize("program,why", [
    (sdpa_program(s=20, t=32), "query rows are not a multiple of BLOCK_M"),
    (sdpa_program(s=32, t=20), "keys are not a multiple of BLOCK_N"),
    (sdpa_program(s=32, t=32, d=24), "head dim is padded")], ids=["row_tail", "key_tail", "head_pad"])
def test_tma_attention_refuses_partial_tiles_and_says_why(program, why):
    plan, gi = attention_group(program)
    got = lower_group(plan, gi, attention.Tiling(gi, tuple(SMALL.items())), "_g", isa="tl.dot+tma")
    assert isinstance(got, str) and "tl.dot+tma (attention)" in got and why in got, got


def test_scale_is_folded_into_the_exp2_argument_unless_a_mask_is_in_scaled_units():
    plain = lowered(sdpa_program(s=16, t=16)).source
    assert "p = tl.exp2(qk * " in plain and "tl.max(qk, 1) * " in plain  # one FMA per score
    masked = lowered(sdpa_program(s=16, t=16, mask=(16, 16))).source
    assert "p = tl.exp2(qk - m_use[:, None])" in masked


# -- multi-head attention -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [bf16, fp32], ids=lambda d: d.name)
@pytest.mark.parametrize("d", [16, 32, 64])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_multi_head_attention(dtype, d, causal, tmp_path):
    kernel = check(sdpa_program(b=2, hq=2, hkv=2, s=21, t=21, d=d, dtype=dtype, causal=causal), tmp_path)
    assert ("hi = tl.minimum" in kernel.source) == causal
    assert ('input_precision="ieee"' in kernel.source) == (dtype is fp32)
    assert "(bh //" not in kernel.source  # one kv head per query head


def test_fp16_causal_with_more_keys_than_queries(tmp_path):
    check(sdpa_program(hq=3, hkv=3, s=12, t=40, d=32, dtype=fp16, causal=True), tmp_path, BLOCK_N=32)


@pytest.mark.parametrize("lead", [0, 1])
def test_fewer_batch_dims(lead, tmp_path):
    check(sdpa_program(hq=3, hkv=3, s=33, t=18, d=24, causal=True, lead=lead), tmp_path)


# -- masks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask", [(7, 9), (2, 1, 7, 9), (2, 4, 7, 9), (9,), (7, 1)], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_additive_mask_with_grouped_heads(mask, causal, tmp_path):
    kernel = check(sdpa_program(b=2, hq=4, hkv=2, s=7, t=9, d=16, causal=causal, mask=mask), tmp_path)
    assert "qk += bias" in kernel.source


@pytest.mark.parametrize("diagonal,fill", [(2, -math.inf), (-1, -30.0), (0, 0.0), (-3, -math.inf)])
def test_causal_mask_diagonal_and_fill(diagonal, fill, tmp_path):
    program = written_out_attention(s=20, t=36, diagonal=diagonal, fill=fill)
    if diagonal < 0 and fill == -math.inf:  # rows with no key at all are NaN in the reference: keep the rest
        kernel = lowered(program)
        assert f"<= {diagonal}, qk, float(\"-inf\"))" in kernel.source
        return
    kernel = check(program, tmp_path)
    assert ("hi = tl.minimum" in kernel.source) == (fill == -math.inf)


@pytest.mark.parametrize("scale,shifted", [(None, True), (0.3, False), (None, False)])
def test_softmax_without_scale_or_max_shift(scale, shifted, tmp_path):
    kernel = check(written_out_attention(scale=scale, shifted=shifted), tmp_path)
    assert ("softmax_drop_max_shift" in kernel.source) == (not shifted)


# -- what stays in torch ----------------------------------------------------------------------------
def _epilogue() -> Program:
    bl = Builder("sdpa_residual")
    q, k, v, r = (bl.input(n, (1, 2, 5, 16), bf16) for n in "qkvr")
    return bl.build(bl.emit("add", bl.emit("sdpa", q, k, v, scale=None, causal=False), r))


def _prologue() -> Program:
    bl = Builder("scaled_q")
    q, k, v = (bl.input(n, (1, 2, 5, 16), bf16) for n in "qkv")
    return bl.build(bl.emit("sdpa", bl.emit("exp", q), k, v, scale=None, causal=False))


def _probs_too() -> Program:
    bl = Builder("probs_too")
    q, k, v = (bl.input(n, (2, 5, 16), fp32) for n in "qkv")
    probs = bl.emit("softmax", bl.emit("matmul", q, bl.emit("transpose", k, perm=(0, 2, 1))), axis=-1)
    return bl.build([bl.emit("matmul", probs, v), probs])


def _tensor_scale() -> Program:
    bl = Builder("tensor_scale")
    q, k, v = (bl.input(n, (2, 5, 16), fp32) for n in "qkv")
    w = bl.input("w", (5,), fp32)
    x = bl.emit("mul", bl.emit("matmul", q, bl.emit("transpose", k, perm=(0, 2, 1))), w)
    return bl.build(bl.emit("matmul", bl.emit("softmax", x, axis=-1), v))


def _float64() -> Program:
    return sdpa_program(dtype=fp64)


@pytest.mark.parametrize("make,reason", [(_epilogue, "epilogue add"), (_prologue, "attention q: exp"),
                                         (_probs_too, "writes 2 tensors"), (_tensor_scale, "scalar constant"),
                                         (_float64, "float64")],
                         ids=["epilogue", "prologue", "probs_output", "tensor_scale", "float64"])
def test_deviating_groups_stay_in_torch_and_say_why(make, reason, tmp_path):
    program = make()
    plan, gi = attention_group(program)
    got = lower_group(plan, gi, None, "_g")
    assert not isinstance(got, GroupKernel) and reason in got, got
    kernel = emit(candidate_for(program, H200, -1, SMALL), H200, "k")
    assert "torch:" in kernel.meta["lowering"] and reason in kernel.source
    if program.nodes[program.outputs[0]].dtype is not fp64:
        out = run_kernel(kernel, program.expand(), tmp_path)
        assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_blocks_too_small_for_tl_dot():
    plan, gi = attention_group(sdpa_program())
    tiling = candidate_for(sdpa_program(), H200, -1, {**SMALL, "BLOCK_M": 8}).tilings[gi]
    got = lower_group(plan, gi, tiling, "_g")
    assert isinstance(got, str) and "BLOCK_M=8" in got


# -- static facts ---------------------------------------------------------------------------------
def test_the_named_rules_are_proven_in_the_store():
    entries = {e["name"]: e for e, _ in load_entries()}
    for name in (*attention.ONLINE_RULES, attention.UNSHIFTED_RULE):
        assert entries[name]["proof"]["status"] == "proven", name


PORTABLE = {"program_id", "arange", "load", "store", "dot", "trans", "exp2", "maximum", "minimum", "max", "sum",
            "where", "full", "zeros", "float32", "bfloat16", "float16", "constexpr"}
"""The ``tl`` names the kernels may use: present with the same meaning in Triton 3.6 and 3.9."""


def test_source_is_deterministic_and_uses_only_portable_triton():
    program = sdpa_program(b=2, hq=4, hkv=2, s=37, t=37, d=24, causal=True, mask=(2, 1, 37, 37))
    source = lowered(program).source
    assert source == lowered(program).source
    jit = source.split("def kernel(")[0]
    assert set(re.findall(r"\btl\.(\w+)", jit)) <= PORTABLE
    assert "descriptor" not in jit and "block_ptr" not in jit


# -- property ---------------------------------------------------------------------------------------
@st.composite
def attention_cases(draw):
    lead = draw(st.integers(0, 2))
    hkv, group = (draw(st.integers(1, 2)), draw(st.integers(1, 3))) if lead else (1, 1)
    s, t = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    heads = (2, hkv * group)[2 - lead:]
    mask = draw(st.sampled_from([None, (s, t), (t,), (s, 1), (*heads, s, t)]))
    return dict(b=2, hq=hkv * group, hkv=hkv, s=s, t=t, d=draw(st.sampled_from([8, 16, 24, 32])), lead=lead,
                dtype=draw(st.sampled_from([bf16, fp32])), causal=draw(st.booleans()), mask=mask), \
        {"BLOCK_M": draw(st.sampled_from([16, 32])), "BLOCK_N": draw(st.sampled_from([16, 32]))}


@settings(max_examples=int(os.environ.get("AXON_EG_ATTENTION_EXAMPLES", "20")), deadline=None)
@given(attention_cases())
def test_random_attention_matches_the_reference(tmp_path_factory, case):
    shape, blocks = case
    check(sdpa_program(**shape), tmp_path_factory.mktemp("k"), **blocks)


# -- grouped-query heads by repeat_interleave ---------------------------------------------------------
def repeated_kv_program(b: int, hkv: int, group: int, s: int, t: int, d: int, dtype, causal: bool) -> Program:
    """Grouped-query attention written as torch's ``k.repeat_interleave(group, dim=1)``: each key/value head
    expanded, broadcast over its ``group`` query heads and merged into the head axis by a reshape."""
    bl = Builder("gqa_repeat_interleave")
    q = bl.input("q", (b, hkv * group, s, d), dtype)
    kv = []
    for name in "kv":
        x = bl.input(name, (b, hkv, t, d), dtype)
        wide = bl.emit("broadcast_to", bl.emit("expand_dims", x, axis=2), shape=(b, hkv, group, t, d))
        kv.append(bl.emit("reshape", wide, shape=(b, hkv * group, t, d)))
    return bl.build(bl.emit("sdpa", q, *kv, scale=None, causal=causal))


@pytest.mark.slow  # about 6 s: random grouped-query attention under the interpreter
@settings(max_examples=int(os.environ.get("AXON_EG_ATTENTION_EXAMPLES", "20")) // 2, deadline=None)
@given(b=st.integers(1, 2), hkv=st.integers(1, 3), group=st.integers(1, 4), s=st.integers(1, 33),
       t=st.integers(1, 33), d=st.sampled_from([8, 16, 24]), dtype=st.sampled_from([bf16, fp32]),
       causal=st.booleans())
def test_heads_repeated_by_a_reshape_are_read_in_place(tmp_path_factory, b, hkv, group, s, t, d, dtype, causal):
    """The matcher sees through the broadcast and the reshape: the batch splits into (kv heads, query heads
    per kv head), k and v are read at ``bh // group`` (no copy), and the kernel matches the reference."""
    program = repeated_kv_program(b, hkv, group, s, t, d, dtype, causal)
    plan, gi = attention_group(program)
    a = attention_match.match(plan, gi)
    assert a.group == group and a.heads == b * hkv * group
    kernel = check(program, tmp_path_factory.mktemp("k"), BLOCK_M=16, BLOCK_N=16)
    if group > 1 and hkv * b > 1:
        assert f"(bh // {group})" in kernel.source


# -- q, k and v sliced from one fused projection (``qkv(x).chunk(3, dim=-1)``) ----------------------
def fused_qkv_program(b: int, t: int, h: int, d: int, dtype, causal: bool, order: tuple[int, int, int],
                      extra: int) -> Program:
    """q, k, v as slices of one [B, T, 3 H D + extra] buffer (a fused projection's ``chunk``, in any order,
    with ``extra`` trailing columns no one reads), each viewed as heads and transposed, then ``sdpa``."""
    bl = Builder("fused_qkv")
    x = bl.input("qkv", (b, t, 3 * h * d + extra), dtype)
    parts = [bl.emit("slice", x, axis=2, start=i * h * d, stop=(i + 1) * h * d, step=1) for i in range(3)]
    heads = [bl.emit("transpose", bl.emit("reshape", p, shape=(b, t, h, d)), perm=(0, 2, 1, 3)) for p in parts]
    q, k, v = (heads[i] for i in order)
    return bl.build(bl.emit("sdpa", q, k, v, scale=None, causal=causal))


@settings(max_examples=int(os.environ.get("AXON_EG_ATTENTION_EXAMPLES", "20")) // 2, deadline=None)
@given(b=st.integers(1, 2), t=st.integers(1, 33), h=st.integers(1, 3), d=st.sampled_from([8, 16, 24]),
       dtype=st.sampled_from([bf16, fp32]), causal=st.booleans(), order=st.permutations([0, 1, 2]),
       extra=st.sampled_from([0, 1, 5]), isa=st.sampled_from([None, "sdpa"]))
def test_q_k_v_sliced_from_one_fused_projection_are_read_in_place(tmp_path_factory, b, t, h, d, dtype, causal,
                                                                  order, extra, isa):
    """The slices are part of the attention group and become offsets into the one buffer (no copies), for
    our flash kernel and for the library's attention, and both match the reference."""
    program = fused_qkv_program(b, t, h, d, dtype, causal, tuple(order), extra)
    plan, gi = attention_group(program)
    a = attention_match.match(plan, gi)
    assert sorted((a.q.offset, a.k.offset, a.v.offset)) == [0, h * d, 2 * h * d]
    assert t == 1 or a.q.rows == a.k.rows == a.v.rows == 3 * h * d + extra  # one row: any stride
    kernel = lowered(program, isa, BLOCK_M=16, BLOCK_N=16)
    assert kernel.meta["lowering"] == f"{isa or 'triton'}:1", kernel.source
    out = run_kernel(kernel, program.expand(), tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
    assert ("storage_offset() + " if isa else f"+ {h * d}") in kernel.source
