"""Pooling windows in our element-wise kernel (ISA choice ``window`` of a library group holding a pooling):
every output element computes its window, unrolled, with the group's prologue and epilogue fused, under
TRITON_INTERPRET=1 against the float64 reference on random shapes with odd and size-1 spatial dims,
max and avg pooling in 1-3 d, strides, padding, dilation (max), ceil mode and count_include_pad (avg)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.emit import emit, window_pool  # noqa: E402
from axon_eg.backends.triton.isa import LIBRARY_CALL, WINDOW  # noqa: E402
from axon_eg.errors import AxonError  # noqa: E402
from axon_eg.extract.candidates import isa_choices  # noqa: E402
from axon_eg.extract.fusion import LIBRARY  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp32  # noqa: E402
from axon_eg.testing.kernels import candidate_for, run_kernel  # noqa: E402

H200 = load("h200")


@st.composite
def pools(draw):
    spatial = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(("max", "avg")))
    ks = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    sizes = tuple(draw(st.sampled_from((1, 2, 5, 7, 9))) for _ in range(spatial))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    pad = tuple(draw(st.integers(0, k // 2)) for k in ks)
    attrs = {"kernel_size": ks, "stride": stride, "padding": pad, "ceil_mode": draw(st.booleans())}
    if kind == "max":
        attrs["dilation"] = tuple(draw(st.integers(1, 2)) for _ in range(spatial))
    else:
        attrs["count_include_pad"] = draw(st.booleans())
    return kind, spatial, sizes, attrs


def _padding_only_window(size: int, k: int, stride: int, pad: int, dilation: int, ceil: bool) -> bool:
    """Whether some output's window lies wholly in the padding (torch then gives -inf for a max and 0 / 0 for
    an average without the padding: no finite value to compare)."""
    span = dilation * (k - 1) + 1
    out = (size + 2 * pad - span + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad:
        out -= 1
    return any(all(not 0 <= o * stride - pad + j * dilation < size for j in range(k)) for o in range(max(0, out)))


def _assume_finite(pool) -> None:
    """Draws with an output window wholly in the padding are assumed away (no finite value to compare)."""
    kind, spatial, sizes, attrs = pool
    dil = attrs.get("dilation", (1,) * spatial)
    assume(not any(_padding_only_window(n, k, st_, p, d, attrs["ceil_mode"]) for n, k, st_, p, d in
                   zip(sizes, attrs["kernel_size"], attrs["stride"], attrs["padding"], dil)))


@settings(max_examples=int(os.environ.get("AXON_EG_POOL_EXAMPLES", "30")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pool=pools(), batch=st.sampled_from((1, 2)), channels=st.sampled_from((1, 3)),
       dtype=st.sampled_from((fp32, bf16)), prologue=st.booleans(), epilogue=st.booleans())
def test_window_pooling_matches_float64(pool, batch, channels, dtype, prologue, epilogue, tmp_path):
    kind, spatial, sizes, attrs = pool
    _assume_finite(pool)
    b = Builder("pool")
    x = b.input("x", (batch, channels, *sizes), dtype)
    v = b.emit("tanh", x) if prologue else x
    try:
        y = b.emit(f"{kind}_pool{spatial}d", v, **attrs)
    except AxonError:  # a window that does not fit (torch refuses it alike)
        assume(False)
    if epilogue:
        y = b.emit("sigmoid", b.emit("mul", y, b.constant(1.5, dtype)))
    program = b.build([y]).expand()
    lib = next(gi for gi, p in enumerate(candidate_for(program).plan.groups) if p.kind == LIBRARY)
    cand = candidate_for(program, isa=((lib, WINDOW),))
    assert window_pool(cand.plan, lib) is not None
    assert any(dict(c).get(lib) == WINDOW for c in isa_choices(cand.plan, H200, TRITON))
    kernel = emit(cand, H200, "k")
    assert "torch.nn.functional" not in kernel.source.split("def kernel(")[1], kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_the_library_call_pays_torch_pooling_rate_and_its_epilogue_pass():
    """max_pool1d(k=4, s=3, p=1, ceil) of fp32 [64, 96, 32773] then a sigmoid: torch's pooling (1.48 TB/s
    measured) and a second pass for the sigmoid, against one pass at the copy bandwidth for the window
    kernel: the window kernel is predicted faster, by more than 2x."""
    b = Builder("p")
    x = b.input("x", (64, 96, 32773), fp32)
    y = b.emit("sigmoid", b.emit("max_pool1d", x, kernel_size=(4,), stride=(3,), padding=(1,), ceil_mode=True))
    program = b.build([y]).expand()
    cand = candidate_for(program)
    gi = next(g for g, p in enumerate(cand.plan.groups) if p.kind == LIBRARY)
    lib = TRITON.cost(cand.plan, cand.tilings, H200, isa=((gi, LIBRARY_CALL),)).seconds
    win = TRITON.cost(cand.plan, cand.tilings, H200, isa=((gi, WINDOW),)).seconds
    assert win * 2 < lib


@settings(max_examples=25, deadline=None)
@given(spatial=st.integers(1, 3), k=st.integers(2, 4), big=st.sampled_from((97, 211, 509)), kind=st.sampled_from(("max", "avg")))
def test_window_tilings_keep_their_loads_in_flight_per_thread(spatial, k, big, kind):
    """A pooling window computed by our kernel loads each of its positions per output element: the first-
    ranked tiling keeps window positions x elements per thread within the hardware file's bound whenever
    some tiling does (a 3x3x3 max pool measured 366 us at one element per thread, 878 at 16)."""
    from axon_eg.backends.triton import cost as cost_module
    from axon_eg.extract.fusion import plans
    from axon_eg.extract.tiling import rank_tilings

    b = Builder("pool")
    x = b.input("x", (8, 16, *([big] * spatial)), fp32)
    y = b.emit(f"{kind}_pool{spatial}d", x, kernel_size=(k,) * spatial, stride=(2,) * spatial, padding=(1,) * spatial)
    plan = plans(b.build([y]).expand())[0]
    taps, limit = k ** spatial, H200.value("costs.window_loads_per_thread")
    assert cost_module.window_taps(plan, 0) == taps
    ranked = rank_tilings(plan, 0, H200, TRITON.templates, TRITON.group_cost)
    per_thread = [max(1, t.typed.BLOCK // (t.typed.num_warps * 32)) for t in ranked]
    if any(taps * p <= limit for p in per_thread):
        assert taps * per_thread[0] <= limit, (taps, ranked[0].values)


@settings(max_examples=int(os.environ.get("AXON_EG_POOL_EXAMPLES", "30")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pool=pools(), batch=st.sampled_from((1, 2)), channels=st.sampled_from((1, 3)),
       act=st.sampled_from(("mish", "gelu", "relu", "tanh")), shared=st.booleans(), epilogue=st.booleans())
def test_a_poolings_producers_move_into_its_window(pool, batch, channels, act, shared, epilogue, tmp_path):
    """A per-channel bias and an activation before a pooling (a conv's epilogue before a max pool): the
    backend's derived plan moves them into the pooling's group, whose only ISA choice is then our window
    kernel (it computes them at every window position); read elsewhere too (``shared``: also a program
    output), they stay where they were. Under TRITON_INTERPRET=1 against float64."""
    from axon_eg.backends.triton.backend import TritonBackend
    from axon_eg.extract.fusion import plans, window_producers

    kind, spatial, sizes, attrs = pool
    _assume_finite(pool)
    b = Builder("pool")
    x = b.input("x", (batch, channels, *sizes), fp32)
    bias = b.input("bias", (channels,) + (1,) * spatial, fp32)
    v = b.emit(act, b.emit("add", x, bias))
    try:
        y = b.emit(f"{kind}_pool{spatial}d", v, **attrs)
    except AxonError:
        assume(False)
    if epilogue:
        y = b.emit("mul", y, b.constant(1.5, fp32))
    program = b.build([y, v] if shared else [y]).expand()
    derived = [d for p in plans(program) for d in TritonBackend().derived_plans(p)
               if any(window_producers(d, gi) for gi in range(len(d.groups)))]
    if shared:
        assert not derived
        return
    assert derived
    plan = derived[-1]
    lib = next(gi for gi, g in enumerate(plan.groups) if g.kind == LIBRARY)
    assert {program.nodes[n].op for n in window_producers(plan, lib)} == {"add", act}
    assert [dict(c).get(lib) for c in isa_choices(plan, H200, TRITON)] == [WINDOW] * len(isa_choices(plan, H200, TRITON))
    cand = candidate_for(program, plan=plan, isa=((lib, WINDOW),))
    kernel = emit(cand, H200, "k")
    assert kernel.source.count("@triton.jit") == 1, kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
