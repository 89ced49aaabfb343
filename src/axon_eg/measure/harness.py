"""The fixed measurement harness: inputs, reference, correctness gate and timing.

Generated code never creates inputs, computes the reference or times itself; this module does.
It imports only the standard library, numpy and torch (triton is only needed by the candidates).

Calling convention of a candidate ``fn`` (``mode``):

* ``"dps"`` (destination passing): ``fn(*inputs, *outputs)`` writes into the preallocated output
  tensors; its return value is ignored. The outputs are poisoned (NaN, or the dtype's minimum for
  integer dtypes) before every run, so an element the candidate never writes fails the check. Each
  output is a contiguous view into a larger buffer with ``GUARD_ELEMS`` guard elements before and after,
  filled with a NaN-payload sentinel; a guard whose bits changed is an out-of-bounds write.
* ``"return"``: ``fn(*inputs)`` returns one tensor or a tuple/list of tensors.
* ``"auto"`` (default): ``"dps"`` when ``fn`` takes exactly ``len(inputs) + len(outputs)`` positional
  parameters, ``"return"`` when it takes ``len(inputs)``; otherwise ``"dps"`` when outputs are known.

The reference is either a callable (float64 numpy arrays in, one array or a tuple of arrays out)
applied to the very inputs the candidate sees (after rounding to their dtype), or precomputed outputs:
a mapping ``trial seed -> list of arrays`` (or a callable ``seed -> list of arrays``).
"""

from __future__ import annotations

import inspect
import math
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

TOLERANCES: dict[str, float] = {"fp64": 1e-9, "fp32": 1e-4, "tf32": 1e-3, "bf16": 1e-2, "fp16": 1e-2, "bool": 0.0,
                                 "int32": 0.0, "int64": 0.0}
"""Tolerance per output dtype. An output passes when (1) its norm-wise error is small,
``rms(out - ref) <= tol * scale`` with ``scale = max(1, rms(ref))``, and (2) no element is grossly off,
``|out - ref| <= GROSS * tol * (scale + |ref|)``. The error of a 16-bit result of an accumulation (a
matmul over K terms, a chain of rounded intermediates) follows the output's typical magnitude, not each
element's, and over millions of elements its tail reaches several times its rms: the eager baseline
itself of a bf16 gated MLP (K = 11008) has elements 1.5% of the output's rms off. A real bug (a wrong
index, a missing mask, an unwritten tile) puts whole elements off by about the output's magnitude and
fails (2); a systematic small bias fails (1). A bool or integer output must equal its reference exactly."""
GROSS = 32.0
STEP_FRACTION = 2.0**-16
"""A program with a step function of computed values (a manifest entry's ``steps``, from the registry fact:
rounding, sign, comparisons, argmax, sort indices) may be off by a step at isolated elements, where its
operand computed in fp32 lands on the other side of the step than the float64 reference (torch's own fp32
eager does: a per-row int8 fake quantization of 8192 x 8192 has 57 such elements of 67M). Up to this fraction
of an output's elements (at least one) may then fail the gross test (2), or differ in an exact output; the
norm-wise test (1) still holds a float output. A real bug (a wrong index, a missing mask) moves far more."""

TORCH_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                                         "fp64": torch.float64, "bool": torch.bool, "int32": torch.int32,
                                         "int64": torch.int64}
EXACT = ("bool", "int32", "int64")  # outputs compared exactly

L2_FLUSH_BYTES = 256 * 1024 * 1024
MIN_TRIALS = 3
TRIAL_ELEMS = (1 << 26, 1 << 28)
"""Correctness trials by the elements of a kernel's inputs: ``MIN_TRIALS`` up to the first bound, 2 up to
the second, 1 beyond (one trial of 2^28 random values covers more than many of small ones, and each costs
the inputs, the float64 reference and the comparison again: seconds at these sizes)."""
DEVICE_DRAW_ELEMS = 1 << 24
"""An input of more elements is drawn on a GPU by the device's own generator (torch's CPU generator takes
about a second per 10^8 values, paid by every trial of every kernel); smaller ones by the CPU generator,
the same values on every machine."""
MIN_RUNS = 30
GUARD_ELEMS = 4096
"""Guard elements on each side of every dps output (4096 keeps the output 16 KB-aligned for fp32)."""

GUARD_BITS: dict[int, tuple[torch.dtype, int]] = {
    2: (torch.int16, 0x7FAD),  # a NaN with a payload both as fp16 and as bf16
    4: (torch.int32, 0x7FC0DEAD),  # fp32 quiet NaN with a payload
    8: (torch.int64, 0x7FF8_0000_DEAD_BEEF),
    1: (torch.int8, 0x5A),
}
"""Sentinel bit pattern of the guard regions, by element size: (integer view dtype, bits). Compared
bitwise, so a candidate writing NaN (or anything else) into a guard is caught."""


@dataclass(frozen=True)
class TensorInput:
    """One input tensor the harness makes: name, concrete shape, dtype string ("bf16", "fp32", "int64", ...) -- the
    bundle manifest's ``inputs`` entries, not the program's symbolic ``ir.program.InputSpec``; ``positive`` asks for
    uniform values in ``POSITIVE`` (for logs, square roots, divisors) instead of a standard normal."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "fp32"
    positive: bool = False
    high: int | None = None  # an index input: values drawn in 0 .. high - 1
    scale: float = 1.0  # a weight's normal draws scaled by 1 / sqrt(fan-in) (``backends.kernel.input_specs``)

    @staticmethod
    def coerce(spec: Any) -> TensorInput:
        if isinstance(spec, TensorInput):
            return spec
        if isinstance(spec, Mapping):
            high = spec.get("high")
            return TensorInput(str(spec["name"]), tuple(int(d) for d in spec["shape"]), str(spec.get("dtype", "fp32")),
                             bool(spec.get("positive", False)), None if high is None else int(high),
                             float(spec.get("scale", 1.0)))
        name, shape, dtype, *rest = spec
        return TensorInput(str(name), tuple(int(d) for d in shape), str(dtype), bool(rest[0]) if rest else False)

    def __post_init__(self) -> None:
        if self.dtype not in TORCH_DTYPES:
            raise ValueError(f"input {self.name!r}: unknown dtype {self.dtype!r} (expected one of {list(TORCH_DTYPES)})")


@dataclass
class Outcome:
    """What the harness observed for one candidate. ``status`` is ok / compile_error / structure_error /
    runtime_error / wrong_result; ``stage`` is where it stopped (compile, structure, run, correctness,
    timing, done). ``structure_error`` is a kernel that exceeds the hardware's resources (Triton's
    ``OutOfResources``: shared memory, registers)."""

    status: str = "ok"
    stage: str = "done"
    error: str | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    trials: int = 0
    median_us: float | None = None
    iqr_us: float | None = None
    mean_us: float | None = None
    min_us: float | None = None
    runs: int | None = None
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "extra" and not k.startswith("_")}
        d.update(self.extra)
        return d


POSITIVE = (0.5, 2.0)
"""The range of a positive input: ``axon_eg.ir.inputs.POSITIVE`` (this module imports no axon_eg module, so
the value is restated; ``tests/test_inputs.py`` ties the two)."""


def make_inputs(specs: Sequence[Any], seed: int, device: str | torch.device = "cpu",
                device_draw: bool = False) -> list[torch.Tensor]:
    """Seeded inputs: standard normal times the spec's ``scale`` (exact zeros replaced; a module's weight is
    drawn at 1 / sqrt(fan-in), as layers are initialized, so that a deep contraction's outputs keep unit scale: at
    unit scale a 4096-wide q and k projection make softmax logits in the hundreds, and even eager bf16 is judged
    wrong against float64), or uniform in ``POSITIVE`` for positive specs;
    a bool spec true with probability 1/2, an integer one in +-1 .. +-8, an index one (``high``) in
    0 .. high - 1.

    Drawn by torch's CPU generator (the same values on every machine, whatever ``device`` is), in
    float32, then rounded to the spec's dtype and moved to ``device``; with ``device_draw`` (the reference
    is computed from these very tensors, or none is) on a GPU an input of more than ``DEVICE_DRAW_ELEMS``
    elements by the GPU's generator, seeded alike (the same values on every run of that GPU type)."""
    device = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    big = torch.Generator(device=device).manual_seed(int(seed)) if device_draw and device.type == "cuda" else None
    out = []
    for spec in map(TensorInput.coerce, specs):
        g = big if big is not None and math.prod(spec.shape) > DEVICE_DRAW_ELEMS else gen
        where = g.device
        if spec.dtype == "bool":  # a mask: each element true with probability 1/2
            out.append((torch.rand(spec.shape, generator=g, device=where) < 0.5).to(device))
            continue
        if spec.high is not None:  # indices into an axis of ``high`` elements
            out.append(torch.randint(0, spec.high, spec.shape, generator=g, device=where)
                       .to(TORCH_DTYPES[spec.dtype]).to(device))
            continue
        if spec.dtype in ("int32", "int64"):  # small integers, never zero: +-1 .. +-8
            mag = torch.randint(1, 9, spec.shape, generator=g, device=where)
            sign = torch.randint(0, 2, spec.shape, generator=g, device=where) * 2 - 1
            out.append((mag * sign).to(TORCH_DTYPES[spec.dtype]).to(device))
            continue
        if spec.positive:
            lo, hi = POSITIVE
            t = torch.rand(spec.shape, generator=g, dtype=torch.float32, device=where) * (hi - lo) + lo
        else:
            t = torch.randn(spec.shape, generator=g, dtype=torch.float32, device=where) * spec.scale
        t = t.to(TORCH_DTYPES[spec.dtype])
        t = torch.where(t == 0, torch.full_like(t, 0.5 * spec.scale), t)  # never zeros, also after rounding to 16 bits
        out.append(t.to(device))
    return out


def guarded_empty(shape: Sequence[int], dtype: torch.dtype, device: torch.device, guard: int = GUARD_ELEMS,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """A contiguous tensor of ``shape`` that is a view into a buffer with ``guard`` sentinel elements on
    each side; returns ``(view, buffer)``. :func:`guard_damage` tells whether the guards were written."""
    n = int(np.prod(shape, dtype=np.int64))
    int_dtype, bits = GUARD_BITS[torch.empty((), dtype=dtype).element_size()]
    buf = torch.full((n + 2 * guard,), bits, dtype=int_dtype, device=device).view(dtype)
    return buf[guard:guard + n].view(tuple(shape)), buf


def guard_damage(buf: torch.Tensor, n: int, guard: int = GUARD_ELEMS) -> tuple[int, int]:
    """Elements of the guard regions (before, after) of a :func:`guarded_empty` buffer whose bits changed."""
    int_dtype, bits = GUARD_BITS[buf.element_size()]
    raw = buf.view(int_dtype)
    before = int((raw[:guard] != bits).sum())
    after = int((raw[guard + n:] != bits).sum())
    return before, after


def _poison(t: torch.Tensor, trial: int = 0) -> None:
    """Fill an output before the kernel writes it: NaN, the integer minimum, or for bool true in even trials
    and false in odd ones (an element left unwritten is then wrong in one of two trials)."""
    if t.is_floating_point():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(trial % 2 == 0)
    else:
        t.fill_(torch.iinfo(t.dtype).min)


def _to64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


def _as_list(x: Any) -> list[Any]:
    if isinstance(x, (tuple, list)):
        return list(x)
    return [x]


def resolve_mode(fn: Callable[..., Any], n_in: int, n_out: int | None, mode: str = "auto") -> str:
    if mode in ("dps", "return"):
        return mode
    if mode != "auto":
        raise ValueError(f"unknown calling mode {mode!r}")
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins, triton launchers without a signature
        return "dps" if n_out else "return"
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if n_out is not None and len(pos) == n_in + n_out and n_out > 0:
        return "dps"
    if len(pos) == n_in:
        return "return"
    return "dps" if n_out else "return"


def reference_outputs(reference: Any, seed: int, inputs: Sequence[torch.Tensor]) -> list[np.ndarray] | list[torch.Tensor]:
    """Float64 reference outputs for the trial with ``seed`` (see the module docstring for the forms).
    A callable marked ``_takes_torch`` gets the input tensors and returns float64 tensors (kept on the
    device; large programs are checked without copying to the host)."""
    if getattr(reference, "_takes_torch", False):
        with torch.no_grad():
            return [r.to(torch.float64) for r in _as_list(reference(*inputs))]
    if isinstance(reference, Mapping):
        if seed not in reference:
            raise KeyError(f"no precomputed reference outputs for trial seed {seed}")
        return [np.asarray(r, dtype=np.float64) for r in _as_list(reference[seed])]
    if getattr(reference, "_takes_seed", False):
        return [np.asarray(r, dtype=np.float64) for r in _as_list(reference(seed))]
    return [np.asarray(r, dtype=np.float64) for r in _as_list(reference(*[_to64(t) for t in inputs]))]


def _call(fn: Callable[..., Any], mode: str, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> list:
    if mode == "dps":
        fn(*inputs, *outputs)
        return list(outputs)
    return _as_list(fn(*inputs))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _stream_sync(device: torch.device) -> None:
    """Wait for the current stream alone: what the timing's events see (work on another stream is not waited for)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


SETTLE_S = 10.0
"""How long a wrong output's re-check waits for the threads the call started."""


def _settle(device: torch.device, threads: Sequence[Any]) -> None:
    """Let work the call left behind finish: every stream of the device, and the threads it started (up to
    ``SETTLE_S`` in all)."""
    deadline = time.monotonic() + SETTLE_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    _sync(device)


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, stage) of an exception raised by a candidate: Triton's ``OutOfResources`` (a kernel asking
    for more shared memory or registers than the GPU has) is a structure error, compilation errors are
    compile errors, anything else a runtime error."""
    names = {c.__name__ for c in type(exc).__mro__}
    if any("OutOfResources" in n for n in names):
        return "structure_error", "structure"
    if names & {"CompilationError", "CompileTimeAssertionFailure", "SyntaxError"}:
        return "compile_error", "compile"
    return "runtime_error", "run"


def compare(got: torch.Tensor, ref: Any, tol: float, allowed: int = 0) -> tuple | None:
    """Compare one output with its float64 reference on the output's device (a GPU compares 64M
    elements in milliseconds), by the two tests of ``TOLERANCES``; ``allowed`` elements may fail the gross
    test (``STEP_FRACTION``), and an exact output (``tol`` 0) then skips the norm-wise one. Returns (kind
    "nonfinite" / "over" / "norm" / "ok", count, first index, got, expected, max abs err, max rel err), "ok"
    carrying only the error statistics and "norm" the rms error and its bound in place of got / expected."""
    g = got.detach().to(torch.float64)
    r = ref if isinstance(ref, torch.Tensor) else torch.from_numpy(np.asarray(ref, dtype=np.float64))
    r = r.to(device=g.device, dtype=torch.float64)

    def first(mask: torch.Tensor) -> tuple[int, ...]:
        flat = int(torch.nonzero(mask.reshape(-1))[0])
        return tuple(int(i) for i in np.unravel_index(flat, tuple(mask.shape))) if mask.dim() else ()

    bad = ~torch.isfinite(g)
    if bool(bad.any()):
        i = first(bad)
        return ("nonfinite", int(bad.sum()), i, float(g[i]), float(r[i]), float("inf"), float("inf"))
    if g.numel() == 0:
        return None
    err = (g - r).abs()
    abs_err = float(err.max())
    rel_err = float((err / r.abs().clamp_min(1e-30)).max())
    scale = max(1.0, float(torch.sqrt(torch.mean(r * r))))
    over = err > GROSS * tol * (scale + r.abs())
    count = int(over.sum())
    if count > allowed:
        i = first(over)
        return ("over", count, i, float(g[i]), float(r[i]), abs_err, rel_err)
    if count and tol == 0.0:  # an exact output with its allowed isolated steps
        return ("ok", 0, (), 0.0, 0.0, abs_err, rel_err)
    rms_err = float(torch.sqrt(torch.mean(err * err)))
    if rms_err > tol * scale:
        return ("norm", g.numel(), (), rms_err, tol * scale, abs_err, rel_err)
    return ("ok", 0, (), 0.0, 0.0, abs_err, rel_err)


def trials_for(specs: Sequence[Any], asked: int = MIN_TRIALS) -> int:
    """The correctness trials run on inputs ``specs`` when ``asked`` for: at least ``MIN_TRIALS``, at most 2
    or 1 above the bounds of ``TRIAL_ELEMS``."""
    elems = sum(math.prod(TensorInput.coerce(s).shape) for s in specs)
    trials = max(int(asked), MIN_TRIALS)
    return trials if elems <= TRIAL_ELEMS[0] else min(trials, 2 if elems <= TRIAL_ELEMS[1] else 1)


def check_correctness(fn: Callable[..., Any], specs: Sequence[Any], reference: Any, *, seed: int = 0,
                      trials: int = MIN_TRIALS, device: str | torch.device = "cpu", mode: str = "auto",
                      out_dtypes: Sequence[str] | None = None, tolerance: str | None = None,
                      steps: bool = False) -> Outcome:
    """Run ``fn`` on ``trials`` fresh seeded inputs (seeds ``seed, seed+1, ...``) and compare with the
    float64 reference. Output dtypes default to the first input's dtype. ``tolerance``: a key of
    ``TOLERANCES`` the outputs are held to at least (``tf32``: the program's library convolutions run
    with TF32 tensor cores, torch's default ``torch.backends.cudnn.allow_tf32``). ``steps``: the program has
    a step function of computed values (``STEP_FRACTION``)."""
    specs = [TensorInput.coerce(s) for s in specs]
    device = torch.device(device)
    trials = trials_for(specs, trials)
    res = Outcome(device=str(device), stage="correctness")
    max_abs = max_rel = 0.0
    inputs: list[torch.Tensor] = []
    previous: list[Any] | None = None  # the last trial's reference outputs and the candidate's, on the host
    for t in range(trials):
        s = seed + t
        fresh = make_inputs(specs, s, device, device_draw=bool(getattr(reference, "_takes_torch", False)))
        if t == 0:
            inputs = fresh
        else:  # new values in the same tensors: a result kept by input pointer or from an earlier call is wrong here
            for x, y in zip(inputs, fresh):
                x.copy_(y)
            del fresh
        saved = [x.clone() for x in inputs]
        try:
            refs = reference_outputs(reference, s, inputs)
        except Exception as exc:  # the reference is the harness's, so a failure here is not the candidate's
            raise RuntimeError(f"reference failed for trial seed {s}: {exc}") from exc
        if t == 1 and previous is not None and all(_same(r, q) for r, q in zip(refs, previous[0])):
            res.extra["constant_reference"] = True  # its output depends on no input: reported apart, never averaged
        dts = list(out_dtypes) if out_dtypes else [specs[0].dtype if specs else "fp32"] * len(refs)
        guarded = [guarded_empty(r.shape, TORCH_DTYPES[d], device) for r, d in zip(refs, dts)]
        outputs = [o for o, _ in guarded]
        for o in outputs:
            _poison(o, t)
        m = resolve_mode(fn, len(inputs), len(outputs), mode)
        before = set(threading.enumerate())
        try:
            got = _call(fn, m, inputs, outputs)
            _stream_sync(device)  # as the timing sees it: the current stream finished, nothing else waited for
            started = [t for t in threading.enumerate() if t not in before]
        except Exception as exc:
            res.status, res.stage = classify(exc)
            res.error = "".join(traceback.format_exception(exc))[-4000:]
            return res
        res.trials = t + 1
        res._out_shapes = [tuple(r.shape) for r in refs]  # for timing; not a row column
        for x, x0, spec in zip(inputs, saved, specs):
            if not torch.equal(x, x0):  # inputs never hold NaN, so exact equality is the test
                res.status, res.error = "wrong_result", f"candidate mutated input {spec.name!r} (trial seed {s})"
                return res
        for j, ((o, buf), r) in enumerate(zip(guarded, refs)):
            before, after = guard_damage(buf, o.numel())
            if before or after:
                where = " and ".join(f"{k} elements {side}" for k, side in ((before, "before"), (after, "after")) if k)
                res.status = "wrong_result"
                res.error = (f"out-of-bounds write: {where} output {j} (shape {tuple(r.shape)}) were overwritten "
                             f"(trial seed {s})")
                return res
        if len(got) != len(refs):
            res.status, res.error = "wrong_result", f"expected {len(refs)} outputs, got {len(got)}"
            return res
        tol = max([TOLERANCES[d] for d in dts] + ([TOLERANCES[tolerance]] if tolerance else [])) if dts else 1e-4
        for j, (g, r) in enumerate(zip(got, refs)):
            if not isinstance(g, torch.Tensor):
                res.status, res.error = "wrong_result", f"output {j} is {type(g).__name__}, not a tensor"
                return res
            if tuple(g.shape) != tuple(r.shape):
                res.status, res.error = "wrong_result", f"output {j} has shape {tuple(g.shape)}, expected {r.shape}"
                return res
            allowed = max(1, int(g.numel() * STEP_FRACTION)) if steps else 0
            found = compare(g, r, 0.0 if dts[j] in EXACT else tol, allowed)
            if found is None:
                continue
            if found[0] in ("nonfinite", "over", "norm"):
                _settle(device, started)
                again = compare(g, r, 0.0 if dts[j] in EXACT else tol, allowed)
                if again is None or again[0] == "ok":
                    res.status, res.stage = "wrong_result", "integrity"  # right only once the rest had finished
                    res.error = (f"output {j} was not ready when the call returned and the current stream finished; it "
                                 f"was once {'the threads it started and ' if started else ''}every stream had: work "
                                 f"left on another stream or a thread outlives the call, and the timing would not "
                                 f"see it (trial seed {s})")
                    return res
            kind, count, first, got_v, want_v, abs_err, rel_err = found
            if kind in ("nonfinite", "over", "norm") and previous is not None and j < len(previous[1]) \
                    and not _same(r, previous[0][j]) and torch.equal(g.detach().cpu(), previous[1][j]):
                res.status, res.stage = "wrong_result", "integrity"  # wrong here, and exactly what it gave before
                res.error = (f"output {j} is the previous call's: new values in the same input buffers gave the same "
                             f"result (outputs cached between calls or by input pointer; trial seed {s})")
                return res
            max_abs, max_rel = max(max_abs, abs_err), max(max_rel, rel_err)
            res.max_abs_err, res.max_rel_err = max_abs, max_rel
            if kind == "nonfinite":
                hint = " (outputs are NaN-poisoned before the run: NaN may be an unwritten element)" if m == "dps" else ""
                res.status, res.max_abs_err = "wrong_result", float("inf")
                res.error = (f"output {j}: {count} of {g.numel()} elements are NaN/Inf, first at index {first}{hint} "
                             f"(trial seed {s})")
                return res
            if kind == "over":
                res.status = "wrong_result"
                res.error = (f"output {j}: {count} of {g.numel()} elements beyond {GROSS:g} x tolerance {tol} (first "
                             f"at {first}: got {got_v!r}, expected {want_v!r}; max abs err {max_abs:.3g}; trial seed {s})")
                return res
            if kind == "norm":
                res.status = "wrong_result"
                res.error = (f"output {j}: rms error {got_v:.3g} > tolerance {tol} x max(1, rms(reference)) = "
                             f"{want_v:.3g} (max abs err {max_abs:.3g}; trial seed {s})")
                return res
        _sync(device)  # nothing of this trial still running into the next one's
        previous = ([np.array(r, copy=True) if isinstance(r, np.ndarray) else r.detach().cpu().clone() for r in refs],
                    [g.detach().cpu().clone() if isinstance(g, torch.Tensor) else g for g in got])
    res.status, res.stage = "ok", "done"
    return res


def _same(a: Any, b: Any) -> bool:
    """Two reference outputs (NumPy arrays or tensors) equal element for element."""
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    b = b.detach().cpu().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b))


def output_buffers(specs: Sequence[TensorInput], out_shapes: Sequence[tuple[int, ...]], out_dtypes: Sequence[str],
                   device: str | torch.device) -> list[torch.Tensor]:
    """The buffers a destination-passing call writes: ``out_shapes`` in ``out_dtypes`` (default: the first
    input's dtype); none for a call that returns its outputs, or that takes no inputs at all (a whole model
    timed through a closure over its inputs)."""
    if not out_shapes:
        return []
    if not out_dtypes and not specs:
        raise ValueError("output buffers need their dtypes when the call takes no inputs")
    dts = list(out_dtypes) or [specs[0].dtype] * len(out_shapes)
    return [torch.empty(tuple(s), dtype=TORCH_DTYPES[d], device=device) for s, d in zip(out_shapes, dts)]


def time_candidate(fn: Callable[..., Any], specs: Sequence[Any], *, seed: int = 0, device: str | torch.device = "cuda",
                   mode: str = "auto", out_shapes: Sequence[tuple[int, ...]] = (), out_dtypes: Sequence[str] = (),
                   warmup: int = 10, runs: int = MIN_RUNS, stop_above_us: float | None = None
                   ) -> dict[str, float | int | None]:
    """Latency in microseconds on CUDA: with ``stop_above_us``, after the warm-up (at least one call and
    ``WARMUP_S``), ``PROBE_RUNS`` timed runs, and when their median is above it the timing stops there
    (``"stopped": True``: a kernel many times slower than one already measured costs a few runs, not
    minutes). The warm-up is ``warmup`` calls (one with a stop limit) and at least ``WARMUP_S`` of
    back-to-back work, so that the GPU has left its idle clocks: a card that sat idle while a kernel compiled starts at a
    fraction of its boost clock), then batches of ``runs`` (>= 30) timed runs, each run preceded by an L2
    flush (writing a 256 MB buffer) and timed with CUDA events; a batch is enqueued whole, behind a spinning
    kernel that holds the GPU until the host has enqueued it all, and synchronized once, so the GPU stays
    busy (a host round trip per run lets the clocks drop between runs) and a run's window holds device work
    only, never a wait for the host to launch (``_batch``). A batch whose
    spread (IQR) exceeds ``STEADY_IQR`` of its median (clock ramps, a busy neighbour) is followed by another,
    up to ``MAX_BATCHES``; the statistics are the steadiest batch's (``steadiest``), ``runs`` counts every
    timed run. On CPU every field is None."""
    device = torch.device(device)
    if device.type != "cuda":
        return {"median_us": None, "iqr_us": None, "mean_us": None, "min_us": None, "runs": None}
    runs = max(int(runs), MIN_RUNS)
    specs = [TensorInput.coerce(s) for s in specs]
    inputs = make_inputs(specs, seed, device, device_draw=True)  # timing: the values need no reference
    outputs = output_buffers(specs, out_shapes, out_dtypes, device)
    m = resolve_mode(fn, len(inputs), len(outputs), mode)
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    calls, t0 = 0, time.perf_counter()
    while calls < (1 if stop_above_us is not None else max(1, warmup)) or (
            time.perf_counter() - t0 < WARMUP_S and calls < WARMUP_MAX_CALLS):
        flush.zero_()
        _call(fn, m, inputs, outputs)
        calls += 1
        if calls % WARMUP_SYNC_EVERY == 0:  # the host clock then measures GPU work, not enqueueing
            torch.cuda.synchronize(device)
    torch.cuda.synchronize(device)
    if stop_above_us is not None:  # after the warm-up: an idle card's clocks would make any kernel look slow
        probe = _batch(fn, m, inputs, outputs, flush, PROBE_RUNS)
        if statistics.median(probe) > stop_above_us:
            return {"median_us": statistics.median(probe), "iqr_us": None, "mean_us": statistics.fmean(probe),
                    "min_us": min(probe), "runs": PROBE_RUNS, "stopped": True}
    batches: list[list[float]] = []
    while len(batches) < MAX_BATCHES and (not batches or _spread(batches[-1]) > STEADY_IQR):
        batches.append(_batch(fn, m, inputs, outputs, flush, runs))
    times = steadiest(batches)
    q = statistics.quantiles(times, n=4)
    return {"median_us": statistics.median(times), "iqr_us": q[2] - q[0], "mean_us": statistics.fmean(times),
            "min_us": min(times), "runs": runs * len(batches)}


WARMUP_S = 0.3
"""Seconds of back-to-back calls (each after an L2 flush) before the first timed batch."""
WARMUP_MAX_CALLS = 20000
"""Upper bound on warm-up calls (a kernel of a few microseconds reaches ``WARMUP_S`` long before)."""
WARMUP_SYNC_EVERY = 8
"""The warm-up synchronizes every this many calls, so that its host clock follows the GPU."""
def _batch(fn: Callable[..., Any], m: str, inputs: list, outputs: list, flush: torch.Tensor, runs: int) -> list[float]:
    """``runs`` timed runs in microseconds, each after an L2 flush, enqueued whole and synchronized once. The
    GPU is held back first (``HOLD_CYCLES`` of a spinning kernel), so that the host has enqueued the whole
    batch before the first run starts: a run never waits inside its timed window for the host to launch
    its kernels (a Python hiccup of 100 us made a 23 us call measure 195 us; held, the same calls measure
    the same as undisturbed ones: benchmarks/results/2026-12-06-issue20-buckets-h100/harness/)."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(HOLD_CYCLES)
    for start, end in events:
        flush.zero_()
        start.record()
        _call(fn, m, inputs, outputs)
        end.record()
    torch.cuda.synchronize(flush.device)
    return [start.elapsed_time(end) * 1000.0 for start, end in events]


HOLD_CYCLES = 100_000_000
"""GPU clock cycles the GPU spins before a timed batch (about 50 ms at 2 GHz: room for the host to enqueue a
batch of calls of up to 1 ms of Python each)."""
PROBE_RUNS = 3
"""Timed runs before the warm-up when a stop limit is given (``time_candidate``'s ``stop_above_us``)."""
STEADY_IQR = 0.05
"""A timing batch is steady when its interquartile range is at most this fraction of its median."""
MAX_BATCHES = 3


def _spread(times: Sequence[float]) -> float:
    q = statistics.quantiles(times, n=4)
    return (q[2] - q[0]) / max(statistics.median(times), 1e-12)


def steadiest(batches: Sequence[Sequence[float]]) -> list[float]:
    """The batch with the smallest relative spread (IQR / median); the first among equals."""
    return list(min(batches, key=_spread))


def measure(fn: Callable[..., Any], specs: Sequence[Any], reference: Any, *, seed: int = 0, trials: int = MIN_TRIALS,
            device: str | torch.device | None = None, mode: str = "auto", out_dtypes: Sequence[str] | None = None,
            warmup: int = 10, runs: int = MIN_RUNS, time_wrong: bool = False,
            stop_above_us: float | None = None, tolerance: str | None = None, steps: bool = False,
            intact: Callable[[], str | None] | None = None) -> Outcome:
    """Correctness gate, then (on CUDA, when correct) timing. ``device`` defaults to CUDA when available.
    ``time_wrong`` times a candidate that ran but missed the tolerance too (baselines: their speed is the
    bar to beat whatever their numerics; the status stays ``wrong_result``). ``stop_above_us``: a correct
    kernel whose first timed runs are slower than that is recorded as ``performance`` (its probe median
    kept) without the full timing. ``intact()``: None, or why the harness can no longer be trusted (a clock the
    candidate replaced: ``measure.integrity.patched``), asked after the correctness trials and after the timing
    (status ``wrong_result``, stage ``integrity``)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    res = check_correctness(fn, specs, reference, seed=seed, trials=trials, device=device, mode=mode,
                            out_dtypes=out_dtypes, tolerance=tolerance, steps=steps)

    def broken() -> bool:
        why = intact() if intact is not None else None
        if why is not None:
            res.status, res.stage, res.error = "wrong_result", "integrity", why
            res.median_us = res.iqr_us = res.mean_us = res.min_us = None
        return why is not None

    if broken() or (res.status != "ok" and not (time_wrong and res.status == "wrong_result")):
        return res
    specs = [TensorInput.coerce(s) for s in specs]
    try:
        stats = time_candidate(fn, specs, seed=seed, device=device, mode=mode, out_shapes=res.__dict__["_out_shapes"],
                               out_dtypes=list(out_dtypes or []), warmup=warmup, runs=runs, stop_above_us=stop_above_us)
    except Exception as exc:
        status, stage = classify(exc)
        res.status, res.stage = status, ("timing" if stage == "run" else stage)
        res.error = "".join(traceback.format_exception(exc))[-4000:]
        return res
    if stats.pop("stopped", False):
        res.status, res.stage = "performance", "timing"
        res.error = (f"stopped after {stats['runs']} timed runs: median {stats['median_us']:.1f} us > "
                     f"{stop_above_us:.1f} us, the limit from the fastest kernel measured before it")
    for k, v in stats.items():
        setattr(res, k, v)
    broken()
    return res
