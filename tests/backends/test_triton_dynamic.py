"""Shape-generic Triton kernels (``emit(..., ranges=...)``, ``ir.traced``) and shape buckets
(``saturate_and_extract(sizes=...)``): a kernel built at one binding and called at other sizes of its
ranges equals the float64 reference under TRITON_INTERPRET=1; outside its ranges, or where a guard it
recorded fails, it raises naming the dim; the static kernel is unchanged."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from benchmarks import suite  # noqa: E402
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg import buckets  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.errors import AxonError, InvalidArgument, KernelCallError  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir import dims as D  # noqa: E402
from axon_eg.ir import traced  # noqa: E402
from axon_eg.ir.dtypes import fp32  # noqa: E402
from axon_eg.testing.kernels import candidate_for, fp32_conditioned, load_kernel, run_kernel  # noqa: E402
from axon_eg.testing.strategies import programs  # noqa: E402

H200 = load("h200")


# -- the traced sizes themselves --------------------------------------------------------------------
@given(st.integers(1, 5000), st.integers(1, 64), st.integers(0, 300))
def test_traced_arithmetic_keeps_the_value_and_the_expression(m, c, k):
    with traced.tracing({"M": m}) as (values, recorder):
        M = values["M"]
        for got in (M * c + k, (M * c + k) // 7, (M * c) % 16, M * c - k, traced.concrete(M) * 3):
            expr = got.sym if isinstance(got, traced.Traced) else got
            assert int.__int__(got) == D.evaluate(expr, {"M": m})
            if isinstance(got, traced.Traced):  # the text is the expression, valid Python over dim_M
                assert eval(str(got), {"dim_M": m}) == int.__int__(got)
        assert recorder.guards == []  # arithmetic decides nothing


@given(st.integers(2, 5000), st.integers(5, 5000))
def test_decisions_record_the_guard_that_keeps_them(m, other):
    with traced.tracing({"M": m}) as (values, recorder):
        M = values["M"]
        outcome = M * 4 < other
        assert M * 4 + 1 > 0 and M >= 1  # decided by the sizes being >= 1: nothing to guard
        assert len(recorder.guards) == 1
        g = recorder.guards[0]
        assert g.holds({"M": m}) and outcome == (M * 4 < other)
        flip = other // 4 + (1 if outcome else 0)  # a size on the other side of the decision
        if flip >= 1 and (flip * 4 < other) != outcome:
            assert not g.holds({"M": flip})
        assert int(M) == m  # its exact value: the dim is specialized
        assert traced.Guard(D.sym("M"), "==", m) in recorder.guards


def test_a_bucket_admits_a_kernel_only_where_every_guard_holds():
    with traced.tracing({"M": 100}) as (values, recorder):
        assert values["M"] != 1 and values["M"] * 8 < 1 << 31
    assert traced.holds(recorder.guards, {"M": (2, 4096)}) == (True, "")
    ok, why = traced.holds(recorder.guards, {"M": (1, 4096)})
    assert not ok and why == "M != 1 fails at M=1"


def test_a_shortcut_is_taken_only_where_it_holds_over_the_whole_ranges():
    with traced.tracing({"M": 16}, ranges={"M": (2, 16)}) as (values, recorder):
        assert traced.known((values["M"] + 15) // 16, 1)  # one tile of 16 rows at every size of [2, 16]
    assert [g.readable() for g in recorder.guards] == ["((15 + M)//16) == 1"]
    with traced.tracing({"M": 16}, ranges={"M": (2, 17)}) as (values, recorder):
        assert not traced.known((values["M"] + 15) // 16, 1)  # two tiles at 17: the general code
    assert recorder.guards == []
    assert traced.known(3, 3) and not traced.known(3, 4)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 400), st.sampled_from([1, 16, 64, 128, 1024]), st.integers(1, 9))
def test_an_expression_constant_over_the_ranges_is_written_as_that_constant(lo, width, block, c):
    hi = lo + width
    with traced.tracing({"M": hi}, ranges={"M": (lo, hi)}) as (values, recorder):
        tiles = c * traced.cdiv(values["M"], block)
        text = str(tiles)
    every = {c * -(-m // block) for m in range(lo, hi + 1)}
    if len(every) == 1:  # the launcher refuses sizes outside the ranges, so the constant is exact there
        assert text == str(every.pop()) and traced.holds(recorder.guards, {"M": (lo, hi)}) == (True, "")
        assert any(g.op == "==" for g in recorder.guards) or not isinstance(tiles, traced.Traced)
    else:
        assert "dim_M" in text and recorder.guards == []


# -- shape-generic kernels --------------------------------------------------------------------------
def _binds(program, dim, n):
    try:
        program.bind({dim: n})
    except AxonError:  # a shape rule refuses the size (an empty slice)
        return False
    return True


def _dims_over_one(program):
    return sorted(d for d, v in program.bindings.items() if v > 1)


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
@settings(max_examples=int(os.environ.get("AXON_EG_TRITON_EXAMPLES", "40")))
@given(programs(max_nodes=5, dtypes=(fp32,), allow_library=False, sizes=(2, 3, 5, 8)), st.data())
def test_a_generic_kernel_equals_the_reference_at_other_sizes_of_its_range(tmp_path_factory, program, data):
    """Built at one binding, called at random sizes of its range (odd ones, and the range's ends): equal to
    the float64 reference where its guards admit the whole range; outside the range, KernelCallError."""
    expanded = program.expand()
    dims = _dims_over_one(expanded)
    assume(dims and fp32_conditioned(expanded))
    dim = data.draw(st.sampled_from(dims), label="dim")
    size = expanded.bindings[dim]
    low = next(n for n in range(2, size + 1) if _binds(expanded, dim, n))  # a slice may need a few elements
    ranges = {dim: (low, size + 6)}
    kernel = emit(candidate_for(expanded, H200), H200, "k", ranges=ranges)
    assume(kernel.meta["generic"])
    directory = tmp_path_factory.mktemp("k")
    for n in {low, size + 6, data.draw(st.integers(low, size + 6), label="size")}:
        assume(_binds(expanded, dim, n))
        at = expanded.bind({dim: n})
        assume(fp32_conditioned(at))
        out = run_kernel(kernel, at, directory)
        assert out.status == "ok", f"{dim}={n}: {out.error}\n{kernel.source}"
    fn = load_kernel(kernel, directory)
    outside = expanded.bind({dim: size + 7})
    args = [torch.ones(outside.concrete_shape(i)) for i in [*outside.input_ids, *outside.outputs]]
    with pytest.raises(ValueError, match=rf"{dim} = {size + 7} is outside \[{low}, {size + 6}\]"):
        fn(*args)


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "layernorm", "silu", "rope", "transpose", "cumsum", "sum",
                                  "gelu_mul", "residual_rmsnorm"])
def test_suite_kernels_are_generic_over_their_leading_dim(name, tmp_path):
    """Each suite program's kernel, built at its small sizes, serves 1 (its own bucket aside) to 4x them."""
    program = suite.get(name).bound(small=True)
    dim = next(d for d in ("M", "B", "S") if d in program.bindings)
    size = program.bindings[dim]
    kernel = emit(candidate_for(program, H200), H200, "k", ranges={dim: (2, 4 * size)})
    assert kernel.meta["generic"], kernel.meta["guards"]
    assert "dim_" + dim in kernel.source and f"SIZES = {{'{dim}': (2, {4 * size})}}" in kernel.source
    for n in (3, 4 * size - 1):
        out = run_kernel(kernel, program.bind({dim: n}), tmp_path)
        assert out.status == "ok", f"{dim}={n}: {out.error}\n{kernel.source}"


def test_a_guard_failing_inside_the_range_is_named_and_the_call_refused(tmp_path):
    program = suite.get("silu").bound(small=True)
    kernel = emit(candidate_for(program, H200), H200, "k", ranges={"M": (1, 64)})
    assert not kernel.meta["generic"] and kernel.meta["generic_why"] == "M != 1 fails at M=1"
    fn = load_kernel(kernel, tmp_path)
    at = program.bind(M=1)
    args = [torch.ones(at.concrete_shape(i), dtype=torch.bfloat16) for i in [*at.input_ids, *at.outputs]]
    with pytest.raises(ValueError, match="built for sizes where M != 1; called with M = 1"):
        fn(*args)


def test_arguments_must_agree_on_a_run_time_dim(tmp_path):
    program = suite.get("add").bound(small=True)
    kernel = emit(candidate_for(program, H200), H200, "k", ranges={"M": (2, 64)})
    fn = load_kernel(kernel, tmp_path)
    n, bf = program.bindings["N"], torch.bfloat16
    with pytest.raises(ValueError, match="argument y has M = 6 .*argument x has M = 4"):
        fn(torch.ones(4, n, dtype=bf), torch.ones(6, n, dtype=bf), torch.empty(4, n, dtype=bf))


def test_without_ranges_the_kernel_is_the_static_one():
    program = suite.get("rmsnorm").bound(small=True)
    static = emit(candidate_for(program, H200), H200, "k")
    assert "dim_" not in static.source and "SIZES" not in static.source and "generic" not in static.meta


# -- buckets ----------------------------------------------------------------------------------------
def test_buckets_of_lists_and_ranges():
    assert buckets.buckets({"M": [16, 1, 128, 16]}) == [{"M": (1, 1)}, {"M": (2, 16)}, {"M": (17, 128)}]
    assert buckets.tuned_sizes((1, 100), "M") == [1, 2, 4, 8, 16, 32, 64, 100]
    assert buckets.buckets({"M": [1, 8], "N": (3, 4)}) == [
        {"M": (1, 1), "N": (3, 3)}, {"M": (1, 1), "N": (4, 4)}, {"M": (2, 8), "N": (3, 3)}, {"M": (2, 8), "N": (4, 4)}]
    for bad in ({"M": []}, {"M": [0, 4]}, {"M": (9, 3)}, {"M": "big"}, {}):
        with pytest.raises(InvalidArgument):
            buckets.buckets(bad)


@pytest.mark.slow
def test_a_bucketed_result_serves_every_size_of_its_buckets_and_refuses_the_rest(tmp_path):
    program = suite.get("softmax").program.bind(N=33)
    result = ax.saturate_and_extract(program, sizes={"M": [1, 3, 9]}, k=2, cache_dir=tmp_path, saturation_s=0.3)
    assert [describe for describe in result.table["bucket"].unique(maintain_order=True)] == [
        "M=1", "M in [2, 3]", "M in [4, 9]"]
    assert len(result.buckets) == 3
    bf = torch.bfloat16
    for m in range(1, 10):
        x = torch.randn(m, 33, dtype=bf)
        torch.testing.assert_close(result.best(x).double(), torch.softmax(x.double(), dim=-1), rtol=1e-2, atol=4e-3)
    with pytest.raises(KernelCallError, match=r"M = 10 is outside the sizes it was optimized for \(M in \[1, 9\]\)"):
        result.best(torch.randn(10, 33, dtype=bf))
    with pytest.raises(KernelCallError, match="argument x has shape"):
        result.best(torch.randn(4, 32, dtype=bf))
    again = ax.saturate_and_extract(program, sizes={"M": [1, 3, 9]}, k=2, cache_dir=tmp_path, saturation_s=0.3)
    assert again.cache_hit  # each bucket's run is cached under its own key


def test_ranges_are_checked_before_any_work(tmp_path):
    program = suite.get("softmax").program.bind(M=8, N=16)
    with pytest.raises(InvalidArgument, match="must hold the program's size M=8"):
        ax.saturate_and_extract(program, ranges={"M": (9, 16)}, cache_dir=tmp_path)
    with pytest.raises(InvalidArgument, match="no bound dim 'Q'"):
        ax.saturate_and_extract(program, ranges={"Q": (1, 16)}, cache_dir=tmp_path)
    with pytest.raises(InvalidArgument, match="has no dim 'Q'"):
        ax.saturate_and_extract(program, sizes={"Q": [1, 2]}, cache_dir=tmp_path)



def test_a_dim_no_argument_has_gives_the_static_kernel_saying_why():
    @ax.program(M=3)
    def spread(x: ax.Tensor[1, ax.fp32]):
        y = ax.exp(ax.broadcast_to(x, ("M",)))
        return ax.concat([y, y], axis=0)  # the only argument with M has 2*M elements

    kernel = emit(candidate_for(spread.bind(M=3), H200), H200, "k", ranges={"M": (2, 8)})
    assert not kernel.meta["generic"] and "dim M is no argument's axis" in kernel.meta["generic_why"]
    assert "SIZES" not in kernel.source


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("AXON_EG_BUCKET_EXAMPLES", "6")))
@given(programs(max_nodes=4, dtypes=(fp32,), allow_library=False, sizes=(3, 5)), st.data())
def test_a_bucketed_random_program_serves_every_size_from_1_and_refuses_past_its_buckets(tmp_path_factory, program,
                                                                                         data):
    """A random program optimized for ``sizes={dim: [1, s, 2s + 1]}`` (three buckets, two of them shape-generic
    kernels or, where no candidate is, torch code per size) equals the float64 interpreter at 1, odd sizes and
    the buckets' ends; past the last bucket, KernelCallError naming the dim."""
    from axon_eg.ir.inputs import random_inputs
    from axon_eg.ir.interpret import interpret

    expanded = program.expand()
    dims = _dims_over_one(expanded)
    assume(dims and fp32_conditioned(expanded))
    dim = data.draw(st.sampled_from(dims), label="dim")
    s = expanded.bindings[dim]
    assume(all(_binds(expanded, dim, n) for n in range(1, 2 * s + 3)))
    result = ax.saturate_and_extract(expanded, sizes={dim: [1, s, 2 * s + 1]}, k=2, saturation_s=0.2,
                                     cache_dir=tmp_path_factory.mktemp("cache"))
    for n in sorted({1, 2, s, s + 1, 2 * s + 1, data.draw(st.integers(1, 2 * s + 1), label="size")}):
        at = expanded.bind({dim: n})
        assume(fp32_conditioned(at))
        inputs = random_inputs(at, n)
        got = result.best(*[torch.tensor(inputs[spec.name], dtype=torch.float32) for spec in at.inputs])
        want = interpret(at, inputs)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            scale = max(1.0, float(abs(w).max())) if w.size else 1.0
            assert g.shape == w.shape and float((g.double() - torch.from_numpy(w)).abs().max()) <= 1e-4 * scale, \
                f"{dim}={n}: {result.best}"
    past = expanded.bind({dim: 2 * s + 2})
    with pytest.raises(KernelCallError, match=rf"{dim} = {2 * s + 2} is outside the sizes it was optimized for"):
        result.best(*[torch.ones(past.concrete_shape(i)) for i in past.input_ids])


@pytest.mark.slow
def test_a_bucketed_nki_result_serves_every_size_of_its_buckets(tmp_path):
    """The same buckets on Trainium (simulator): shape-generic NKI kernels read M off their inputs."""
    import numpy as np

    from axon_eg.backends.nki import isa

    program = suite.get("rmsnorm").program.bind(N=64)
    result = ax.saturate_and_extract(program, target="nki", hw="trn2", sizes={"M": [1, 100, 256]}, k=2,
                                     cache_dir=tmp_path, saturation_s=0.3)
    assert set(result.table["status"]) == {"ok"} and result.table["bucket"].n_unique() == 3
    rng = np.random.default_rng(0)
    for m in (1, 7, 100, 101, 255):
        x, w = rng.standard_normal((m, 64)).astype(isa.BFLOAT16), rng.standard_normal(64).astype(isa.BFLOAT16)
        xd = x.astype(np.float64)
        ref = xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + suite.RMS_EPS) * w.astype(np.float64)
        got = np.asarray(result.best(x, w), dtype=np.float64)
        assert got.shape == ref.shape and np.abs(got - ref).max() <= 3e-2 * max(1.0, np.abs(ref).max())
    with pytest.raises(KernelCallError, match=r"M = 300 is outside the sizes it was optimized for \(M in \[1, 256\]\)"):
        result.best(np.ones((300, 64), dtype=isa.BFLOAT16), np.ones(64, dtype=isa.BFLOAT16))
