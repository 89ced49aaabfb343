"""The library conv on channels-last operands (ISA choice ``library+nhwc``): our tiled transposes to and
from NHWC around torch's conv, the element-wise epilogue transposing as it reads, under TRITON_INTERPRET=1
against the float64 reference on random 2-d / 3-d convs and transposed convs (output padding too) with odd
and size-1 dims, strides, padding, dilation, groups, with and without a bias and an epilogue (then the library
transposes back)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton import conv_nhwc  # noqa: E402
from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.backends.triton.isa import LIBRARY_CALL, NHWC  # noqa: E402
from axon_eg.errors import AxonError  # noqa: E402
from axon_eg.extract.candidates import isa_choices  # noqa: E402
from axon_eg.extract.fusion import LIBRARY  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp32  # noqa: E402
from axon_eg.testing.kernels import candidate_for, run_kernel  # noqa: E402

H200, H100 = load("h200"), load("h100")


def _conv_program(spatial: int, batch: int, cin: int, cout: int, sizes: tuple[int, ...], k: int, stride: int,
                  pad: int, dilation: int, groups: int, bias: bool, epilogue: str, dtype=fp32,
                  transposed: bool = False, output_padding: int = 0):
    b = Builder("conv")
    x = b.input("x", (batch, cin, *sizes), dtype)
    weight = (cin, cout // groups) if transposed else (cout, cin // groups)
    w = b.input("w", (*weight, *([k] * spatial)), dtype)
    args = [x, w] + ([b.input("bias", (cout,), dtype)] if bias else [])
    extra = {"output_padding": (output_padding,) * spatial} if transposed else {}
    y = b.emit(f"conv{'_transpose' if transposed else ''}{spatial}d", *args, stride=(stride,) * spatial,
               padding=(pad,) * spatial, dilation=(dilation,) * spatial, groups=groups, **extra)
    if epilogue == "mish_bias":
        cb = b.input("cb", (cout, *([1] * spatial)), dtype)
        y = b.emit("add", b.emit("mish", y), cb)
    elif epilogue == "residual":
        y = b.emit("relu", b.emit("mul", y, b.constant(0.5, dtype)))
    return b.build([y]).expand()


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("AXON_EG_CONV_EXAMPLES", "20")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spatial=st.sampled_from((2, 3)), batch=st.sampled_from((1, 2)), groups=st.sampled_from((1, 2)),
       cin=st.sampled_from((2, 4)), cout=st.sampled_from((2, 6)), size=st.sampled_from((1, 3, 5, 7)),
       k=st.integers(1, 3), stride=st.integers(1, 2), dilation=st.integers(1, 2), bias=st.booleans(),
       epilogue=st.sampled_from(("none", "mish_bias", "residual")), transposed=st.booleans(),
       output_padding=st.integers(0, 1))
def test_channels_last_conv_matches_float64(spatial, batch, groups, cin, cout, size, k, stride, dilation, bias,
                                            epilogue, transposed, output_padding, tmp_path):
    sizes = (size, size + 2, 3)[:spatial]
    pad = k // 2
    # torch: a transposed conv's output padding must be smaller than its stride or its dilation
    output_padding = min(output_padding, max(stride, dilation) - 1) if transposed else 0
    try:
        program = _conv_program(spatial, batch, cin, cout, sizes, k, stride, pad, dilation, groups, bias, epilogue,
                                transposed=transposed, output_padding=output_padding)
    except AxonError:  # a window larger than the padded input (torch refuses it alike)
        assume(False)
    lib = next(gi for gi, g in enumerate(candidate_for(program).plan.groups) if g.kind == LIBRARY)
    cand = candidate_for(program, isa=((lib, NHWC),))
    assert conv_nhwc.core(cand.plan, lib) is not None
    assert any(dict(c).get(lib) == NHWC for c in isa_choices(cand.plan, H200, TRITON))
    kernel = emit(cand, H200, "k")
    body = kernel.source.split("def kernel(")[1]
    assert "_nhwc_transpose[" in body and "channels_last" in body, kernel.source
    if epilogue != "none":  # the epilogue reads the conv's channels-last output as a tiled transpose
        assert body.count("_nhwc_transpose[") == 1, kernel.source
        assert "tl.trans" in kernel.source.split("def kernel(")[0].split(conv_nhwc.NAME)[-1], kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_channels_last_is_a_choice_only_where_it_applies_and_is_measured():
    """fp32 2-d / 3-d convs on a GPU whose hardware file has the channels-last rate (the H200's; the H100's
    file has none), transposed ones too: 1-d convs and bf16 inputs keep the one library choice."""
    def choices(program, hw):
        cand = candidate_for(program)
        lib = next(gi for gi, g in enumerate(cand.plan.groups) if g.kind == LIBRARY)
        return {dict(c).get(lib) for c in isa_choices(cand.plan, hw, TRITON)}

    conv2d = _conv_program(2, 2, 4, 6, (9, 7), 3, 1, 1, 1, 1, True, "mish_bias")
    assert choices(conv2d, H200) == {LIBRARY_CALL, NHWC}
    assert NHWC not in choices(conv2d, H100)
    convt3d = _conv_program(3, 2, 4, 6, (5, 7, 3), 3, 2, 1, 1, 2, True, "none", transposed=True, output_padding=1)
    assert choices(convt3d, H200) == {LIBRARY_CALL, NHWC}
    assert NHWC not in choices(_conv_program(2, 2, 4, 6, (9, 7), 3, 1, 1, 1, 1, True, "mish_bias", bf16), H200)
    b = Builder("c1")
    x, w = b.input("x", (2, 4, 33), fp32), b.input("w", (6, 4, 3), fp32)
    assert NHWC not in choices(b.build([b.emit("relu", b.emit("conv1d", x, w, padding=(1,)))]).expand(), H200)


def test_channels_last_cost_trades_the_rate_for_the_input_transpose():
    """v03's conv (64 x 64 x 96 x 96 -> 128 channels, 3 x 3, then mish and a channel bias): the channels-last
    rate (214 TFLOP/s measured against 113 on NCHW) outweighs one more pass over the input, so the choice is
    predicted faster; a conv with a tiny reduction (1 x 1, 2 input channels) on a large input is not."""
    big = _conv_program(2, 64, 64, 128, (96, 96), 3, 1, 1, 1, 1, True, "mish_bias")
    cand = candidate_for(big)
    lib = next(gi for gi, g in enumerate(cand.plan.groups) if g.kind == LIBRARY)
    nchw = TRITON.cost(cand.plan, cand.tilings, H200, isa=((lib, LIBRARY_CALL),)).seconds
    nhwc = TRITON.cost(cand.plan, cand.tilings, H200, isa=((lib, NHWC),)).seconds
    assert nhwc < 0.85 * nchw
    thin = _conv_program(2, 64, 2, 2, (256, 256), 1, 1, 0, 1, 1, False, "residual")
    cand = candidate_for(thin)
    lib = next(gi for gi, g in enumerate(cand.plan.groups) if g.kind == LIBRARY)
    assert TRITON.cost(cand.plan, cand.tilings, H200, isa=((lib, NHWC),)).seconds > \
        TRITON.cost(cand.plan, cand.tilings, H200, isa=((lib, LIBRARY_CALL),)).seconds


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("AXON_EG_CONV_EXAMPLES", "20")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spatial=st.sampled_from((2, 3)), transposed=st.booleans(), cout=st.sampled_from((2, 6)),
       size=st.sampled_from((3, 5)), kind=st.sampled_from(("max", "avg")), pool_k=st.integers(2, 3),
       pool_stride=st.integers(1, 2), act=st.sampled_from(("mish", "relu")), epilogue=st.booleans())
def test_a_window_kernel_reads_the_channels_last_conv_output(spatial, transposed, cout, size, kind, pool_k,
                                                            pool_stride, act, epilogue, tmp_path):
    """conv (or transposed conv) -> bias -> activation -> pooling: with the conv on channels-last operands and the
    pooling computed window by window (its producers moved into its group), the window kernel reads the conv's
    channels-last output as a tiled transpose (no transpose back: one of our transposes, the input's), and the
    cost model charges no pass for one. Under TRITON_INTERPRET=1 against float64."""
    from axon_eg.backends.triton.backend import TritonBackend
    from axon_eg.backends.triton.isa import WINDOW
    from axon_eg.extract.fusion import plans, window_reader

    b = Builder("conv_pool")
    x = b.input("x", (2, 4, *([size] * spatial)), fp32)
    w = b.input("w", ((4, cout) if transposed else (cout, 4)) + (3,) * spatial, fp32)
    op = f"conv{'_transpose' if transposed else ''}{spatial}d"
    y = b.emit(op, x, w, b.input("bias", (cout,), fp32), padding=(1,) * spatial)
    y = b.emit(f"{kind}_pool{spatial}d", b.emit(act, y), kernel_size=(pool_k,) * spatial,
               stride=(pool_stride,) * spatial, padding=(pool_k // 2,) * spatial)
    if epilogue:
        y = b.emit("mul", y, b.constant(0.5, fp32))
    program = b.build([y]).expand()
    found = [(p, gi) for base in plans(program) for p in TritonBackend().derived_plans(base)
             for gi in range(len(p.groups)) if window_reader(p, gi) is not None]
    assert found
    plan, conv_gi = found[-1]
    choices = ((conv_gi, NHWC), (conv_gi + 1, WINDOW))
    assert any(set(choices) <= set(c) for c in isa_choices(plan, H200, TRITON))
    cand = candidate_for(program, plan=plan, isa=choices)
    kept = TRITON.cost(plan, cand.tilings, H200, isa=choices).groups[conv_gi].bytes
    back = TRITON.cost(plan, cand.tilings, H200, isa=((conv_gi, NHWC), (conv_gi + 1, LIBRARY_CALL))).groups[conv_gi].bytes
    assert kept < back  # the output's transpose back is not charged
    kernel = emit(cand, H200, "k")
    body = kernel.source.split("def kernel(")[1]
    assert body.count("_nhwc_transpose[") == 1 and "channels_last" in body, kernel.source
    assert "tl.trans" in kernel.source.split("def kernel(")[0].split(conv_nhwc.NAME)[-1], kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_the_weights_channels_last_copy_is_made_once_and_again_when_the_weight_changes(tmp_path):
    """A conv weight that is an input of the program goes to channels-last once, not on every call; written in
    place (its version counter moves) or replaced by another tensor, the copy is made again; an inference
    tensor (no version counter) is copied on every call."""
    import torch

    from axon_eg.testing.kernels import load_kernel

    program = _conv_program(2, 2, 4, 6, (5, 7), 3, 1, 1, 1, 1, True, "mish_bias")
    lib = next(gi for gi, g in enumerate(candidate_for(program).plan.groups) if g.kind == LIBRARY)
    kernel = emit(candidate_for(program, isa=((lib, NHWC),)), H200, "k")
    assert f"{conv_nhwc.WEIGHT}(" in kernel.source.split("def kernel(")[1]
    fn = load_kernel(kernel, tmp_path)
    cache = fn.__globals__["_CHANNELS_LAST"]
    torch.manual_seed(0)
    x, w, bias, cb = torch.randn(2, 4, 5, 7), torch.randn(6, 4, 3, 3), torch.randn(6), torch.randn(6, 1, 1)

    def want(weight):
        y = torch.nn.functional.conv2d(x.double(), weight.double(), bias.double(), padding=1)
        return (torch.nn.functional.mish(y) + cb.double()).float()

    def call(weight):
        out = torch.empty(2, 6, 5, 7)
        fn(x, weight, bias, cb, out)
        return out

    torch.testing.assert_close(call(w), want(w), rtol=1e-4, atol=1e-4)
    first = cache[id(w)][1]
    call(w)
    assert cache[id(w)][1] is first  # made once
    w.mul_(-0.5)
    torch.testing.assert_close(call(w), want(w), rtol=1e-4, atol=1e-4)
    assert cache[id(w)][1] is not first
    other = torch.randn(6, 4, 3, 3)
    torch.testing.assert_close(call(other), want(other), rtol=1e-4, atol=1e-4)
    with torch.inference_mode():
        frozen = torch.randn(6, 4, 3, 3)
        torch.testing.assert_close(call(frozen), want(frozen), rtol=1e-4, atol=1e-4)
    assert id(frozen) not in cache


def _chain_program(spatial: int, batch: int, chans: tuple[int, int, int], size: int, k: int, mode: str,
                   tail: str):
    """conv -> scale -> activation -> conv -> ReLU; ``mode`` "residual": the activation is also added to the
    second conv's output (read by that conv's epilogue too), "output": it is also an output of the program."""
    b = Builder("chain")
    c0, c1, c2 = chans
    sizes = (size, size + 2, 3)[:spatial]
    x = b.input("x", (batch, c0, *sizes), fp32)
    w1 = b.input("w1", (c1, c0, *([k] * spatial)), fp32)
    w2 = b.input("w2", (c2 if mode != "residual" else c1, c1, *([3] * spatial)), fp32)
    scale = b.input("s", (c1, *([1] * spatial)), fp32)
    y = b.emit(f"conv{spatial}d", x, w1, padding=(k // 2,) * spatial)
    y = b.emit(tail, b.emit("mul", y, scale))
    z = b.emit(f"conv{spatial}d", y, w2, padding=(1,) * spatial)
    if mode == "residual":
        z = b.emit("add", z, y)
    return b.build([b.emit("relu", z)] + ([y] if mode == "output" else [])).expand()


@settings(max_examples=int(os.environ.get("AXON_EG_CONV_EXAMPLES", "20")) // 4, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spatial=st.sampled_from((2, 3)), batch=st.sampled_from((1, 2)),
       chans=st.tuples(st.sampled_from((1, 3)), st.sampled_from((2, 5)), st.sampled_from((1, 4))),
       size=st.sampled_from((1, 3, 4)), k=st.sampled_from((1, 3)), mode=st.sampled_from(("plain", "residual", "output")),
       tail=st.sampled_from(("relu", "mish")))
def test_a_conv_chain_stays_channels_last_between_convs(spatial, batch, chans, size, k, mode, tail, tmp_path):
    """Both convs channels-last: the first one's epilogue, read by the second conv alone, stores its output
    channels-last and the second conv takes it without a transpose (its buffer viewed so), predicted cheaper
    by that transpose; read by the second conv's epilogue too (a residual), that epilogue reads it
    channels-last where it reads its conv so; an output of the program, it is stored row-major and
    transposed again. Under TRITON_INTERPRET=1 against float64."""
    import re

    from axon_eg.backends.triton.cost import channels_last_chained, gpu_group_cost

    program = _chain_program(spatial, batch, chans, size, k, mode, tail)
    libs = [gi for gi, g in enumerate(candidate_for(program).plan.groups) if g.kind == LIBRARY]
    assert len(libs) == 2
    cand = candidate_for(program, isa=tuple((gi, NHWC) for gi in libs))
    kernel = emit(cand, H200, "k")
    launcher = kernel.source.split("def kernel(")[1]
    # the second conv's input: the epilogue's buffer viewed channels-last, or transposed into one
    viewed = re.search(r"_x = t\d+\.view\(", launcher) is not None
    assert viewed == ("in physical (channels-last) order" in kernel.source), kernel.source
    if mode == "plain":
        assert viewed, kernel.source
    if mode == "output":
        assert not viewed, kernel.source
    assert channels_last_chained(cand.plan, dict(cand.isa)) == ({libs[1]} if mode != "output" else set())
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
    if mode == "plain":  # the chained conv is charged no input transpose
        plain = gpu_group_cost(cand.plan, libs[1], cand.tilings[libs[1]], H200, isa=NHWC)
        fed = gpu_group_cost(cand.plan, libs[1], cand.tilings[libs[1]], H200, isa=NHWC, channels_last_input=True)
        assert fed.seconds < plain.seconds and fed.bytes < plain.bytes
