"""The call-time guard (issue 14, item 8): every emitted Triton launcher, the torch baseline module and
``result.best`` check the arguments against what the kernel was built for (count, shapes, dtypes, one
device, contiguous row-major layout) and refuse a mismatch with one error naming the argument; the right
call still works and matches the float64 reference. Random shapes include 1 and odd sizes; values are
the harness's (never zero)."""

from __future__ import annotations

import ast
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg.backends.kernel import check_call, input_specs  # noqa: E402
from axon_eg.backends.torch.lower import emit_module  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.errors import AxonError, KernelCallError  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.interpret import interpret  # noqa: E402
from axon_eg.measure import harness  # noqa: E402
from axon_eg.result import BestKernel  # noqa: E402
from axon_eg.testing.kernels import candidate_for, load_kernel  # noqa: E402

H200 = load("h200")
TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SIZES = st.sampled_from([1, 2, 3, 5, 7, 11, 16, 17])


@ax.program()
def scaled_rows(x: ax.Tensor["M", "N", ax.fp32], w: ax.Tensor["N", ax.fp32]):
    y = x * w
    return y, y.sum(axis=-1)


@ax.program()
def scaled_rows_bf16(x: ax.Tensor["M", "N", ax.bf16], w: ax.Tensor["N", ax.bf16]):
    y = x * w
    return y, y.sum(axis=-1)


PROGRAMS = {"fp32": scaled_rows, "bf16": scaled_rows_bf16}


def launcher(program, directory, plan_index=-1):
    kernel = emit(candidate_for(program, H200, plan_index), H200, f"k_{program.hash[:10]}_{plan_index % 7}")
    return kernel, load_kernel(kernel, directory)


def outputs_for(program, device="cpu"):
    return [torch.empty(program.concrete_shape(o), dtype=TORCH[program.nodes[o].dtype.name], device=device)
            for o in program.outputs]


def assert_matches_reference(program, xs, outs):
    refs = interpret(program, [x.double().numpy() for x in xs])
    tol = 1e-2 if program.inputs[0].dtype.name == "bf16" else 1e-4
    for got, ref in zip(outs, refs if isinstance(refs, tuple) else (refs,)):
        err = np.abs(got.double().numpy() - ref)
        assert np.all(err <= 4 * tol * (max(1.0, float(np.sqrt(np.mean(ref * ref)))) + np.abs(ref))), err.max()


def refused(fn, *args, match: str):
    with pytest.raises(ValueError, match=match) as info:
        fn(*args)
    assert type(info.value).__name__ == "KernelCallError" and "\n" not in str(info.value)
    return str(info.value)


def strided(t: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous view (every other element of a buffer twice as long)."""
    wide = torch.empty((*t.shape, 2), dtype=t.dtype)
    wide[..., 0] = t
    return wide[..., 0]


@settings(max_examples=12, deadline=None)
@given(m=SIZES, n=SIZES, dtype=st.sampled_from(["fp32", "bf16"]), seed=st.integers(0, 2**16),
       which=st.integers(0, 3), plan_index=st.sampled_from([0, -1]))
def test_launcher_runs_right_calls_and_refuses_each_wrong_one(tmp_path_factory, m, n, dtype, seed, which, plan_index):
    program = PROGRAMS[dtype].bind(M=m, N=n)
    kernel, fn = launcher(program, tmp_path_factory.mktemp("k"), plan_index)
    xs = harness.make_inputs(input_specs(program), seed)
    outs = outputs_for(program)
    fn(*xs, *outs)  # the right call works and is right
    assert_matches_reference(program, xs, outs)

    args = [*xs, *outs]
    names = ["x", "w", "out0", "out1"]
    k, name = which, names[which]
    good = tuple(args[k].shape)
    # another shape
    bad = list(args[k].shape)
    bad[-1] += 1 if bad else 0
    wrong = [*args[:k], torch.ones(bad, dtype=args[k].dtype), *args[k + 1:]]
    msg = refused(fn, *wrong, match=f"argument {name} has shape")
    assert f"{tuple(bad)}, this kernel was built for {good}" in msg
    # another dtype
    other = torch.float16 if args[k].dtype != torch.float16 else torch.float32
    msg = refused(fn, *args[:k], args[k].to(other), *args[k + 1:], match=f"argument {name} has dtype fp16")
    assert f"built for {dtype}[{', '.join(map(str, good))}]" in msg
    # too few, too many, not a tensor
    refused(fn, *args[:k], match=f"missing argument {name} \\(expected {dtype}\\[")
    refused(fn, *args, args[0], match="5 arguments given, this kernel takes 4 \\(x, w, out0, out1\\)")
    refused(fn, *args[:k], args[k].tolist(), *args[k + 1:], match=f"argument {name} is a (list|float), expected a torch Tensor")
    # not contiguous (a tensor of one element always is)
    if args[k].numel() > 1:
        refused(fn, *args[:k], strided(args[k]), *args[k + 1:], match=f"argument {name} is not contiguous")
    # on another device (the meta device holds no data)
    where = "the meta device, which holds no data" if k == 0 else "meta, argument x on cpu"
    refused(fn, *args[:k], args[k].to("meta"), *args[k + 1:], match=f"argument {name} is on {where}")
    fn(*xs, *outs)  # a refused call changed nothing
    assert_matches_reference(program, xs, outs)


def test_a_4x16_input_is_refused_by_a_kernel_built_for_8x16(tmp_path):
    program = scaled_rows_bf16.bind(M=8, N=16)
    _, fn = launcher(program, tmp_path)
    xs = harness.make_inputs(input_specs(program), 3)
    refused(fn, xs[0][:4].contiguous(), xs[1], *outputs_for(program),
            match=r"^kernel: argument x has shape \(4, 16\), this kernel was built for \(8, 16\)$")


def test_the_kernel_file_stays_standalone(tmp_path):
    kernel, _ = launcher(scaled_rows.bind(M=3, N=5), tmp_path)
    tree = ast.parse(kernel.source)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported <= {"math", "torch", "torch.nn.functional", "triton", "triton.language"}
    assert not any(isinstance(node, ast.ImportFrom) for node in ast.walk(tree))
    body = kernel.source[kernel.source.index("def kernel("):]
    assert body.splitlines()[2].strip().startswith("check_call(")  # first thing in the launcher
    assert "SIGNATURE = (\n    ('x', (3, 5), torch.float32)," in kernel.source


def test_an_input_named_like_the_guard_does_not_shadow_it(tmp_path):
    @ax.program()
    def clash(check_call: ax.Tensor[3, 5], SIGNATURE: ax.Tensor[5]):  # noqa: N803
        return check_call + SIGNATURE

    _, fn = launcher(clash, tmp_path)
    xs = harness.make_inputs(input_specs(clash), 0)
    out = outputs_for(clash)
    fn(*xs, *out)
    assert_matches_reference(clash, xs, out)
    refused(fn, xs[0], match="missing argument in_SIGNATURE")


def test_torch_baseline_checks_count_and_shapes_and_keeps_any_dtype():
    program = scaled_rows_bf16.bind(M=4, N=6)
    module: dict = {}
    exec(compile(emit_module(program), "<baseline>", "exec"), module)
    xs = harness.make_inputs(input_specs(program), 1)
    y, s = module["eager"](*xs)
    assert_matches_reference(program, xs, [y, s])
    module["eager"](*(x.float() for x in xs))  # eager computes in its inputs' dtypes
    module["eager"](strided(xs[0]), xs[1])  # and takes any layout
    for fn in (module["eager"], module["compiled"]):
        refused(fn, xs[0][:2], xs[1], match=r"argument x has shape \(2, 6\), this kernel was built for \(4, 6\)")
        refused(fn, xs[0], match=r"missing argument w \(expected \[6\]\)")
        refused(fn, *xs, xs[1], match="3 arguments given, this kernel takes 2")


def test_best_kernel_names_the_missing_argument_and_refuses_other_shapes(tmp_path):
    program = scaled_rows_bf16.bind(M=8, N=16)
    kernel, _ = launcher(program, tmp_path)
    path = tmp_path / "best.py"
    path.write_text(kernel.source)
    best = BestKernel("c00", "candidate", path, "kernel", "dps", program)
    xs = harness.make_inputs(input_specs(program), 2)
    with pytest.raises(KernelCallError, match=r"missing argument w \(expected bf16\[16\]\)$") as info:
        best(xs[0])
    assert isinstance(info.value, AxonError) and isinstance(info.value, ValueError)
    with pytest.raises(KernelCallError, match=r"argument x has shape \(4, 16\), this kernel was built for \(8, 16\)"):
        best(xs[0][:4], xs[1])
    with pytest.raises(KernelCallError, match="argument w has dtype fp32, this kernel was built for bf16"):
        best(xs[0], xs[1].float())
    with pytest.raises(KernelCallError, match="argument x is not contiguous"):
        best(strided(xs[0]), xs[1])
    with pytest.raises(KernelCallError, match="3 arguments given"):
        best(*xs, xs[1])
    y, s = best(*xs)
    assert_matches_reference(program, xs, [y, s])


def test_best_kernel_checks_a_selected_baseline_like_a_candidate(tmp_path):
    program = scaled_rows_bf16.bind(M=5, N=3)
    path = tmp_path / "torch_eager.py"
    path.write_text(emit_module(program))
    best = BestKernel("torch_eager", "baseline", path, "eager", "return", program)
    xs = harness.make_inputs(input_specs(program), 4)
    assert_matches_reference(program, xs, list(best(*xs)))
    with pytest.raises(KernelCallError, match="argument x has dtype fp32, this kernel was built for bf16"):
        best(xs[0].float(), xs[1])
    with pytest.raises(KernelCallError, match=r"missing argument w \(expected bf16\[3\]\)"):
        best(xs[0])


def test_best_kernel_checks_the_numpy_inputs_of_an_nki_kernel(tmp_path):
    import ml_dtypes

    program = scaled_rows_bf16.bind(M=4, N=8)
    best = BestKernel("c00", "candidate", tmp_path / "unused.py", "kernel", "nki", program, "trn2")
    x = np.ones((4, 8), dtype=ml_dtypes.bfloat16)
    w = np.ones((8,), dtype=ml_dtypes.bfloat16)
    best.check((x, w))  # fits (NumPy arrays of any layout: the simulator copies them)
    best.check((np.asfortranarray(x), w))
    with pytest.raises(KernelCallError, match=r"argument x has shape \(8, 4\), this kernel was built for \(4, 8\)"):
        best(x.T.copy(), w)
    with pytest.raises(KernelCallError, match="argument w has dtype fp32, this kernel was built for bf16"):
        best(x, w.astype(np.float32))
    with pytest.raises(KernelCallError, match="argument w is a Tensor, expected a numpy ndarray bf16"):
        best(x, torch.ones(8))
    with pytest.raises(KernelCallError, match=r"missing argument w \(expected bf16\[8\]\)"):
        best(x)


def test_check_call_on_scalars_and_extra_arguments():
    sig = (("a", (2, 3), torch.float32), ("b", (), torch.bfloat16))
    a, b = torch.ones(2, 3), torch.ones((), dtype=torch.bfloat16)
    for _ in range(3):
        check_call((a, b), (), sig, "k", ValueError, torch.Tensor)
    with pytest.raises(ValueError, match=r"argument b has shape \(1,\), this kernel was built for \(\)"):
        check_call((a, b.reshape(1)), (), sig, "k", ValueError, torch.Tensor)
    with pytest.raises(ValueError, match=r"k: 3 arguments given, this kernel takes 2 \(a, b\)"):
        check_call((a, b), (a,), sig, "k", ValueError, torch.Tensor)


AXES = st.one_of(st.sampled_from([1, 2, 3, 4]), st.sampled_from(["M", "N", "2*M"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(AXES, min_size=0, max_size=3), st.sampled_from([None, "fp32", "bf16"])),
                min_size=1, max_size=4),
       st.dictionaries(st.sampled_from(["M", "N"]), st.integers(1, 4)), st.data())
def test_the_fast_check_accepts_exactly_what_the_thorough_one_does(params, sizes, data):
    """``check_call`` answers the usual call itself and hands everything else to ``explain_call``: on random
    signatures (names, expressions, fixed sizes) and random arguments (right, wrong in one axis, dtype,
    layout or count), both accept the same calls with the same dims and refuse the same ones."""
    from axon_eg.backends.kernel import explain_call

    signature = tuple((f"a{k}", tuple(shape), TORCH.get(dt)) for k, (shape, dt) in enumerate(params))
    bound = {"M": sizes.get("M", 2), "N": sizes.get("N", 3)}
    args = []
    for name, shape, dt in signature:
        concrete = [eval(str(w), {}, dict(bound)) if isinstance(w, str) else w for w in shape]
        if data.draw(st.booleans(), label=f"{name} wrong"):
            what = data.draw(st.sampled_from(["axis", "dtype", "layout"] if concrete else ["dtype"]))
            if what == "axis":
                concrete[data.draw(st.integers(0, len(concrete) - 1))] += 1
            elif what == "dtype":
                dt = torch.float16
        t = torch.ones(concrete, dtype=dt or torch.float32)
        if data.draw(st.booleans()) and t.dim() >= 2 and t.shape[0] > 1 and t.shape[1] > 1:
            t = t.transpose(0, 1).contiguous().transpose(0, 1)  # same shape, not row-major
        args.append(t)
    if data.draw(st.booleans()):
        args = args[:-1] if data.draw(st.booleans()) else [*args, torch.ones(1)]
    ranges = {d: (1, data.draw(st.integers(1, 5))) for d in ("M", "N") if any(d in s for _, s, _ in signature)}
    outcomes = []
    for fn in (check_call, explain_call):
        try:
            outcomes.append(("ok", fn(tuple(args), (), signature, "k", KernelCallError, torch.Tensor, True, ranges)))
        except KernelCallError as exc:
            outcomes.append(("refused", str(exc)))
    assert outcomes[0] == outcomes[1]
