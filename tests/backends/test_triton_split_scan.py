"""Split scans (issue 53): few long lines along the last axis, each cut into ``SPLIT`` segments, one launch
folding each segment and one sweeping it from the earlier segments' fold; cumsum and cumprod, with the forms
users write around them (an exclusive scan's concat and slice, a reverse scan's flips, a masked input) fused,
against float64 under TRITON_INTERPRET=1 on random shapes (one line, odd lengths, lengths just above a chunk)."""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton import scan  # noqa: E402
from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.base import NotLowerable  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.egraph.nugraph import Variant  # noqa: E402
from axon_eg.extract.candidates import Candidate  # noqa: E402
from axon_eg.extract.fusion import SCAN, plans  # noqa: E402
from axon_eg.extract.tiling import Tiling, space, tilings  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp32  # noqa: E402
from axon_eg.testing.kernels import run_kernel  # noqa: E402

H200 = load("h200")


def scan_program(shape: tuple[int, ...], op: str, form: str, dtype):
    """``op`` along the last axis of ``x`` (cumprod of ``1 + x / 64``, so that products stay finite), written as
    ``form``: plain, exclusive (zeros concatenated in front, the last element sliced off), reverse (flip, scan,
    flip) or masked (``x * (y > 0)``)."""
    b = Builder(f"split_{op}_{form}")
    x = b.input("x", shape, dtype)
    axis = len(shape) - 1
    v = b.emit("add", b.emit("mul", x, b.constant(1 / 64, fp32)), b.constant(1.0, fp32)) if op == "cumprod" else x
    if form == "masked":
        y = b.input("y", shape, dtype)
        v = b.emit("mul", v, b.emit("cast", b.emit("gt", y, b.constant(0.0, fp32)), dtype=dtype))
    if form == "exclusive":
        first = b.emit("slice", v, axis=axis, start=0, stop=1)
        neutral = b.emit("mul", first, b.constant(0.0 if op == "cumsum" else 1.0, fp32))
        neutral = neutral if op == "cumsum" else b.emit("add", b.emit("mul", first, b.constant(0.0, fp32)),
                                                        b.constant(1.0, fp32))
        v = b.emit("slice", b.emit("concat", neutral, v, axis=axis), axis=axis, start=0, stop=shape[axis])
    if form == "reverse":
        v = b.emit("flip", v, axes=(axis,))
    out = b.emit(op, v, axis=axis)
    if form == "reverse":
        out = b.emit("flip", out, axes=(axis,))
    return b.build([out]).expand()


def split_candidate(program, split: int, chunk: int, lookback: int = 0) -> Candidate:
    plan = next(p for p in plans(program) if any(g.kind == SCAN for g in p.groups) and len(p.groups) == 1)
    t = Tiling(0, (("BLOCK", chunk), ("num_warps", 1), ("CHUNK", chunk), ("LINES", 1), ("SPLIT", split),
                   ("LOOKBACK", lookback)))
    return Candidate(Variant(program, 0, 0, 0), plan, (t,), (), 0.0, TRITON.cost(plan, (t,), H200))


@settings(max_examples=int(os.environ.get("AXON_EG_SPLIT_SCAN_EXAMPLES", "8")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((1, 97), (3, 65), (2, 33), (1, 17), (2, 3, 40))), op=st.sampled_from(("cumsum", "cumprod")),
       form=st.sampled_from(("plain", "exclusive", "reverse", "masked")), split=st.sampled_from((2, 3, 5)),
       chunk=st.sampled_from((8, 16)), dtype=st.sampled_from((fp32, bf16)))
def test_a_split_scan_matches_float64(shape, op, form, split, chunk, dtype, tmp_path):
    program = scan_program(shape, op, form, dtype)
    kernel = emit(split_candidate(program, split, chunk), H200, "k")
    assert "_part[" in kernel.source and "_scan[" in kernel.source and f"SPLIT={split}" in kernel.source, kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


@settings(max_examples=int(os.environ.get("AXON_EG_SPLIT_SCAN_EXAMPLES", "8")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((1, 97), (3, 65), (1, 17), (2, 300), (2, 3, 40))), op=st.sampled_from(("cumsum", "cumprod")),
       form=st.sampled_from(("plain", "exclusive", "reverse", "masked")), chunk=st.sampled_from((8, 16)),
       dtype=st.sampled_from((fp32, bf16)))
def test_a_lookback_scan_matches_float64(shape, op, form, chunk, dtype, tmp_path):
    """One launch, one tile per program: lines of 2 to 38 tiles, so that a look-back crosses windows of 32."""
    program = scan_program(shape, op, form, dtype)
    kernel = emit(split_candidate(program, 1, chunk, lookback=1), H200, "k")
    assert "_lookback[" in kernel.source and "_part[" not in kernel.source, kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_few_long_lines_are_split_and_many_are_not():
    def splits(shape):
        b = Builder("s")
        program = b.build([b.emit("cumsum", b.input("x", shape, fp32), axis=1)]).expand()
        plan = next(p for p in plans(program) if len(p.groups) == 1)
        return {dict(t.values).get("SPLIT", 1) for t in tilings(space(plan, 0, H200, TRITON.templates))[0]}

    assert max(splits((11, 10_000_019))) > 1
    assert splits((8191, 32768)) == {1}


def test_a_lookback_scan_is_offered_for_few_long_lines_and_reads_its_input_once():
    b = Builder("s")
    program = b.build([b.emit("cumsum", b.input("x", (11, 10_000_019), fp32), axis=1)]).expand()
    plan = next(p for p in plans(program) if len(p.groups) == 1)
    found = tilings(space(plan, 0, H200, TRITON.templates))[0]
    lookback = [t for t in found if dict(t.values).get("LOOKBACK")]
    split = [t for t in found if dict(t.values).get("SPLIT", 1) > 1]
    assert lookback and split and not any(dict(t.values).get("SPLIT", 1) > 1 for t in lookback)
    best = {name: min(TRITON.cost(plan, (t,), H200).seconds for t in ts)
            for name, ts in (("lookback", lookback), ("split", split))}
    assert best["lookback"] < best["split"], best  # the split reads every line twice


def test_a_split_along_another_axis_is_refused_with_its_reason():
    b = Builder("s")
    program = b.build([b.emit("cumsum", b.input("x", (4, 300, 3), fp32), axis=1)]).expand()
    plan = next(p for p in plans(program) if len(p.groups) == 1)
    t = Tiling(0, (("BLOCK", 16), ("num_warps", 1), ("SPLIT", 4)))
    with pytest.raises(NotLowerable, match="split scan: along axis 1"):
        scan.check(plan, 0, t)


COMPILE = """
import importlib.util, sys
try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile
except ImportError as exc:  # a Triton without the NVIDIA backend
    print("no NVIDIA backend:", exc)
    sys.exit(0)
spec = importlib.util.spec_from_file_location("k", sys.argv[1])
k = importlib.util.module_from_spec(spec)
spec.loader.exec_module(k)
fn = next(getattr(k, n) for n in dir(k) if n.endswith("_lookback"))
consts = {"CHUNK": 16, "TILES": 19, "LOOKBACK_WINDOW": 32}
sig = {a: "constexpr" if a in consts else "*i64" if a == "scratch" else "*fp32" for a in fn.arg_names}
src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(c),): v for c, v in consts.items()})
ptx = compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
assert "atom" in ptx, ptx[:2000]
print("compiled")
"""


@pytest.mark.slow  # four Triton compiles through PTX, about 10 s
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("form", ["plain", "reverse"])
def test_a_lookback_scan_compiles_for_an_nvidia_target(op, form, tmp_path):
    """The interpreter runs programs one after another, so it never spins; the compiler checks what it does not
    (the loop-carried types of the look-back's while loop, the 64-bit atomics) for an H100 / H200 target."""
    program = scan_program((2, 300), op, form, fp32)
    path = tmp_path / "k.py"
    path.write_text(emit(split_candidate(program, 1, 16, lookback=1), H200, "k").source)
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    out = subprocess.run([sys.executable, "-c", COMPILE, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and ("compiled" in out.stdout or "no NVIDIA backend" in out.stdout), out.stderr[-3000:]
