"""``ax.optimize_triton(path)``: an existing Triton program in, its stages' candidates through the cascade.

1. :func:`axon_eg.triton_in.source.load` reads the file; the reference is its own ``Model`` (KernelBench
   form, the kernels in ``ModelNew``) or the ``Model`` of ``reference`` (the Triton-to-Triton form, whose
   ``Model`` launches the kernels; ``spec`` gives the inputs and ``__init__`` arguments).
2. Every stage's points (:mod:`axon_eg.triton_in.stages`) become candidate files; one that changes anything
   outside its kernels and their launches' keyword arguments is refused before it runs (``wrapper`` stage of
   the cascade, recorded with the reason), as the fixed harness demands.
3. A bundle for the measurement worker: the user's file unchanged is the baseline (``kind`` baseline, id
   ``input``), each candidate a file; each gets the same appended entry (the wrapper built once, seeded with 0,
   from the ``__init__`` arguments, called under ``no_grad``); the reference is the reference ``Model``
   built the same way, run in float64. The worker checks (syntax, structure, correctness on fresh random
   inputs, then timing on a GPU) and writes one row each.
4. The algorithmic stage (:mod:`axon_eg.triton_in.nugraph`): the reference through the νGraph, axon_eg's own
   k best kernels as candidates (a reference the importer refuses is a row saying why).
5. With a ``proposer`` (:mod:`axon_eg.triton_in.proposer`), its refined proposals join as candidates, every
   attempt a row (refused at ``wrapper``, stopped by the cascade, or passed).
6. After a timed round, :func:`combine` applies every stage's winner (each kernel's) to one file, and
   with three winners or more each combination that leaves one out, measured in a second round.
7. The choice: the fastest correct candidate faster than the input, else the input (on a CPU, correctness
   only: the input). ``best.py`` is that file with a header naming the stage and its parameters.

Inputs come from the file's ``get_inputs()`` run under a fake-tensor mode (shapes and dtypes only) or from
the spec's ``inputs`` (``[{"shape": [..], "dtype": "fp32"}, ...]``); the harness makes the values. The spec
is checked whole, and the sizes settled (``small``: the file's ``SMALL_SIZES`` or the spec's ``small``
section; ``sizes``: module constants over those), by :mod:`axon_eg.triton_in.spec` before anything is
written; module constants set for the run are part of every candidate's fixed entry (and set in the
reference), so ``best.py``, the file without that entry, keeps the user's own sizes.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from axon_eg.errors import AxonError
from axon_eg.hw import DEFAULT_HW
from axon_eg.hw import load as load_hw
from axon_eg.measure import worker
from axon_eg.measure.manifest import load_manifest, read_rows
from axon_eg.measure.worker import ROWS_NAME

from .entry import CALL, SHARE
from .launches import trace
from .proposer import Proposer, refine
from .source import TritonInputError, load
from .spec import Harness, _import, harness, read_spec
from .stages import STAGES, points, wrapper_unchanged

Progress = Callable[[str, int, int, str], None]
"""``progress(phase, done, total, detail)``, as the pipeline's: each phase's start (done 0) and end (done ==
total), and in between how far it is."""
PHASES = ("load", "stages", "nugraph", "measure", "combine", "select")
"""The phases ``optimize_triton`` reports: read the input and settle the call (the spec, the sizes); the stages'
candidates; the reference through the νGraph; the worker on every file; the stages' winners combined and
measured; the choice."""

ENTRY = '''

# ===== axon_eg harness entry (fixed: the same in every candidate) =====
import torch as _axon_eg_torch  # noqa: E402
import triton as _axon_eg_triton  # noqa: E402


{allocator}
{constants}_AXON_EG_INIT = {init!r}
'''

ENTRY += SHARE + "\n\n" + CALL

ALLOCATOR = """def _axon_eg_scratch(size, alignment, stream):
    \"\"\"Global scratch for tensor descriptors made inside kernels (tl.make_tensor_descriptor).\"\"\"
    return _axon_eg_torch.empty(size, dtype=_axon_eg_torch.int8, device="cuda")


if hasattr(_axon_eg_triton, "set_allocator"):
    _axon_eg_triton.set_allocator(_axon_eg_scratch)
"""
"""The harness's scratch allocator: a kernel that makes tensor descriptors on the device needs one (the
``tensor_descriptors`` stage's candidates); ``finish`` appends it to a chosen file that makes them."""

REFERENCE = '''"""The reference: ``Model`` of {name}, built as the candidates' wrapper is, run in float64."""
import importlib.util
import pathlib

import torch

_spec = importlib.util.spec_from_file_location("axon_eg_triton_reference", pathlib.Path(__file__).with_name({name!r}))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
for _name, _value in {constants!r}.items():  # the sizes of the run: module constants set over the file's
    setattr(_mod, _name, _value)
_INIT = {init!r}
_MODEL = {{}}


def reference_torch(*tensors):
    device = tensors[0].device
    if device not in _MODEL:
        torch.manual_seed(0)
        _MODEL[device] = _mod.Model(*_INIT).to(device).double().eval()
    with torch.no_grad():
        out = _MODEL[device](*[t.double() if t.is_floating_point() else t for t in tensors])
    return out


reference_torch._takes_torch = True
'''


@dataclass
class TritonResult:
    """What ``optimize_triton`` found: every row (the input, each candidate, refused ones), the choice."""

    best: str  # the id of the chosen file ("input" when nothing beat it)
    best_path: Path
    rows: list[dict[str, Any]]
    timed: bool
    bundle: Path

    @property
    def input_row(self) -> dict[str, Any]:
        return next((r for r in self.rows if r["id"] == "input"), {})

    @property
    def input_wrong(self) -> bool:
        """The input did not run correctly against the reference (and a candidate did: it is ``best``)."""
        return self.input_row.get("status") != "ok" and self.best != "input"

    def summary(self) -> str:
        how = "timed on the GPU" if self.timed else "correctness only (no GPU): the input is kept"
        if self.input_wrong:
            why = (self.input_row.get("error") or "").strip().splitlines()
            how = (f"the input is WRONG against the reference ({self.input_row.get('status')}"
                   f"{': ' + why[0][:160] if why else ''}); best is the "
                   f"{'fastest' if self.timed else 'first'} correct candidate")
        rate = any(r.get("tflops") for r in self.rows)  # the spec gave a flop count: achieved TFLOP/s too
        lines = [f"best: {self.best}; {how}; {len(self.rows)} rows", "",
                 "| id | transform | params | status | median us |" + (" TFLOP/s |" if rate else "") + " error |",
                 "|---|---|---|---|---:|" + ("---:|" if rate else "") + "---|"]
        for r in self.rows:
            us = f"{r['median_us']:.1f}" if r.get("median_us") else "-"
            tf = (f" {r['tflops']:.2f} |" if r.get("tflops") else " - |") if rate else ""
            lines.append(f"| {r['id']} | {r.get('transform', '-')} | {json.dumps(r.get('params')) if r.get('params') else '-'} | "
                         f"{r['status']} | {us} |{tf} {(r.get('error') or '').splitlines()[0][:80] if r.get('error') else ''} |")
        return "\n".join(lines)


def constants_text(constants: dict[str, int]) -> str:
    """Module-level assignments setting the run's sizes in a candidate (part of its fixed entry)."""
    if not constants:
        return ""
    return "# the sizes of this run, over the file's own\n" + "".join(f"{k} = {v!r}\n" for k, v in constants.items())


def optimize_triton(path: str | os.PathLike[str], *, reference: str | os.PathLike[str] | None = None,
                    spec: str | os.PathLike[str] | dict[str, Any] | None = None, hw: str = DEFAULT_HW,
                    out: str | os.PathLike[str] | None = None, device: str | None = None,
                    proposer: Proposer | None = None, rounds: int = 3, nugraph_k: int = 4, small: bool = False,
                    sizes: dict[str, int] | str | None = None, progress: Progress | None = None,
                    check: Callable[[Harness], None] | None = None) -> TritonResult:
    """Optimize the Triton program in ``path`` (see the module docstring). ``device``: "cpu" to check under
    the Triton interpreter only; by default the local GPU when there is one. ``proposer``: a
    :class:`~axon_eg.triton_in.proposer.Proposer` refined for up to ``rounds`` proposals
    (:func:`~axon_eg.triton_in.proposer.refine`); the one that passes is a candidate (``transform``
    ``proposer``), every attempt a row. ``nugraph_k``: how many of axon_eg's own kernels for the reference
    ``Model`` join (:mod:`axon_eg.triton_in.nugraph`; 0: none). ``small``: a spec's ``small`` section, or the
    reference file's ``SMALL_SIZES``; ``sizes``: module constants of the reference file set over those, or an
    Xe-Forge spec's size set by name (:mod:`axon_eg.triton_in.xeforge`; see
    :func:`axon_eg.triton_in.spec.harness`). ``progress(phase, done, total, detail)`` hears of each phase
    (``PHASES``) as it goes; ``check(harness)`` sees the call every candidate gets before anything is written
    or run (raising stops the run). The same in two halves for a GPU elsewhere: :func:`prepare` here,
    ``python -m axon_eg.measure OUT/bundle`` there, :func:`finish` here."""
    report = progress or _quiet
    root = prepare(path, reference=reference, spec=spec, hw=hw, out=out, device=device, proposer=proposer,
                   rounds=rounds, nugraph_k=nugraph_k, small=small, sizes=sizes, progress=report, check=check)
    _measured(root / "bundle", device, report, "measure")
    added = combine(root)
    report("combine", 0, max(added, 1), f"{added} combinations of the stages' winners" if added else "")
    if added:  # the stages' winners on one file: measured in a second round
        _measured(root / "bundle", device, report, "combine")
    else:
        report("combine", 1, 1, "nothing to combine" + ("" if _timed(root) else " (nothing timed)"))
    report("select", 0, 1, "")
    result = finish(root)
    report("select", 1, 1, f"best: {result.best}")
    return result


def combine(out: str | os.PathLike[str]) -> int:
    """After a timed round: each source-to-source stage's fastest correct point faster than the input (for a
    stage with a kernel parameter, each kernel's), applied one after another in stage order to the input, as
    one more candidate (``combined``); with three winners or more, also every combination that leaves one of
    them out (``combined_1``, ...: a winner measured alone may lose next to another, larger tiles under a
    persistent loop, say). They are appended to the bundle, so the worker's resume measures them alone.
    Returns how many were added: 0 (falsy) without timings, when fewer than two stages beat the input, when the
    bundle was combined already, or when every combination is a file already measured."""
    root = Path(out)
    bundle = root / "bundle"
    prepared = json.loads((root / "prepared.json").read_text())
    rows = {r["id"]: r for r in (read_rows(bundle / ROWS_NAME) if (bundle / ROWS_NAME).exists() else [])}
    base = rows.get("input", {}).get("median_us")
    meta = prepared["meta"]
    if not base or rows.get("input", {}).get("status") != "ok" or any(m.get("stage") == "combined" for m in meta.values()):
        return 0
    winners: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}  # (stage, kernel) -> fastest point
    for cid, m in meta.items():
        r = rows.get(cid, {})
        if r.get("status") != "ok" or not r.get("median_us") or r["median_us"] >= base or cid not in prepared["wrapped"]:
            continue
        if m.get("stage") in {st.name for st in STAGES}:
            slot = (m["stage"], str((m.get("params") or {}).get("kernel", "")))
            if slot not in winners or r["median_us"] < winners[slot][0]:
                winners[slot] = (r["median_us"], m["params"])
    slots = sorted(winners)
    combos = [slots] + ([[s for s in slots if s != left] for left in slots] if len(slots) >= 3 else [])
    # the input as the bundle holds it (the bundle may be combined on another machine, where the input's path
    # is not)
    original = load(prepared["input"], (bundle / "input.py").read_text().removesuffix(prepared["entry"]))
    seen = {(bundle / f"{cid}.py").read_text().removesuffix(prepared["entry"]) for cid in prepared["wrapped"]}
    manifest = json.loads((bundle / "manifest.json").read_text())
    if any(c["id"] == "combined" for c in manifest["candidates"]):  # combined already (prepared.json of another copy)
        return 0
    first = manifest["candidates"][0]
    added = 0
    for combo in combos:
        if len(combo) < 2:
            continue  # one stage alone: already measured as that stage's point
        tf, applied = original, []
        for stage in STAGES:  # in dependency order, each on the file the last one wrote
            for name, kernel in combo:
                params = winners[(name, kernel)][1]
                if name == stage.name and (not params.get("kernel") or params["kernel"] in stage.detect(tf)):
                    tf = load(original.path, stage.apply(tf, params))
                    applied.append({"stage": name, **params})
        if len(applied) < 2 or tf.text in seen or wrapper_unchanged(original, tf.text) is not None:
            continue
        seen.add(tf.text)
        cid = "combined" if added == 0 else f"combined_{added}"
        cand = _candidate(bundle, cid, tf.text + prepared["entry"], "candidate", first["inputs"],
                          {"stage": "combined", "params": {"applied": applied}})
        if "tolerance" in first:
            cand["tolerance"] = first["tolerance"]
        manifest["candidates"].append(cand)
        meta[cid] = cand["meta"]
        prepared["wrapped"].append(cid)
        added += 1
    if not added:
        return 0
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (root / "prepared.json").write_text(json.dumps(prepared, indent=1, default=str))
    return added


def prepare(path: str | os.PathLike[str], *, reference: str | os.PathLike[str] | None = None,
            spec: str | os.PathLike[str] | dict[str, Any] | None = None, hw: str = DEFAULT_HW,
            out: str | os.PathLike[str] | None = None, device: str | None = None,
            proposer: Proposer | None = None, rounds: int = 3, nugraph_k: int = 4, small: bool = False,
            sizes: dict[str, int] | str | None = None, progress: Progress | None = None,
            check: Callable[[Harness], None] | None = None) -> Path:
    """Everything before the measurements (arguments as :func:`optimize_triton`): the bundle in
    ``OUT/bundle`` and ``OUT/prepared.json`` (what :func:`finish` needs); returns ``OUT``. A proposer's
    proposals are checked here (on ``device``). The input, the spec and the reference are read and checked
    whole (``check`` then sees the call every candidate gets) before anything is written."""
    report = progress or _quiet
    path = Path(path)
    report("load", 0, 1, path.name)
    tf = load(path)
    spec_hw = load_hw(hw)
    moved = _retargeted(tf.text, spec_hw.vendor, device, str(path))
    if moved.changes:  # written for another vendor's GPU: every candidate starts from the retargeted file
        tf = load(path, moved.text)
    if tf.wrapper == "Model":
        if reference is None:
            raise TritonInputError(f"{path}: its Model launches the kernels; give the PyTorch reference (--reference "
                                   "REF, a KernelBench-format file whose Model computes the same)")
        ref_path = Path(reference)
        if not ref_path.is_file():
            raise TritonInputError(f"{ref_path}: no such reference file")
    else:
        ref_path = path
    checked = read_spec(spec)[0] if spec is not None else None  # the whole spec, before the reference is imported
    if checked is not None and checked["xeforge"] is not None and sizes is None and not small and check is not None:
        call = _largest_that_fits(ref_path, spec, checked["xeforge"], check)
    else:
        call = harness(ref_path, spec, small=small, sizes=sizes)
        if check is not None:
            check(call)
    inputs, init = call.inputs, call.init
    own = call.constants if ref_path == path else {}  # a KernelBench-form input is its own reference
    tf.trace = trace(tf, inputs, init, own)  # the launches at these sizes: the tiling stages' problem sizes
    report("load", 1, 1, f"{call.describe()}; init {init!r}")
    root = Path(out or Path("axon_eg_out") / f"triton_{path.stem}")
    bundle = root / "bundle"
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    _write_reference(bundle, ref_path, init, call.constants, lambda text: _retargeted(text, spec_hw.vendor, device).text)
    shared, compute = _shared(tf, ref_path, init, own, call.constants) if tf.wrapper == "Model" and ref_path != path \
        else ([], None)
    entry = ENTRY.format(init=init, wrapper=tf.wrapper, allocator=ALLOCATOR, constants=constants_text(own),
                         share=shared, ref_constants=dict(call.constants))
    cands: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    wrapped: list[str] = []

    def add(cid: str, text: str, kind: str, meta: dict[str, Any], with_entry: bool = True) -> None:
        cands.append(_candidate(bundle, cid, text + entry if with_entry else text, kind, inputs, meta))
        if with_entry:
            wrapped.append(cid)

    add("input", tf.text, "baseline", {"stage": "retarget", "params": {"from": moved.source, "to": moved.target,
                                                                       "device": moved.device,
                                                                       "changes": len(moved.changes)}}
        if moved.changes else {"stage": "input"})
    if proposer is not None:
        checker = _checker(root / "proposals", ref_path, init, inputs, entry, device, call.constants)
        for a in refine(tf, proposer, checker, rounds):
            if a.status == "ok":
                add(f"p{a.round:02d}", a.text, "candidate", {"stage": "proposer", "params": {"round": a.round}})
            else:
                refused.append({"id": f"p{a.round:02d}", "status": a.status, "stage": a.stage, "transform": "proposer",
                                "params": {"round": a.round}, "error": a.diagnostics})
    report("stages", 0, 1, "")
    found = points(tf, spec_hw)
    for i, point in enumerate(found):
        cid = f"c{i:03d}"
        why = wrapper_unchanged(tf, point.text)
        if why is not None:
            refused.append({"id": cid, "status": "wrapper_changed", "stage": "wrapper", "transform": point.stage,
                            "params": point.params, "error": why})
            continue
        add(cid, point.text, "candidate", {"stage": point.stage, "params": point.params})
    by_stage = ", ".join(f"{k} {len(list(g))}" for k, g in itertools.groupby(pt.stage for pt in found))
    report("stages", 1, 1, f"{len(found)} candidates" + (f" ({by_stage})" if by_stage else ""))
    if nugraph_k:
        from . import nugraph  # lazy: loads torch and egglog (the νGraph stage); the rest of a run needs neither

        report("nugraph", 0, 1, f"the reference through the νGraph, k={nugraph_k}")
        try:
            made = nugraph.candidates(ref_path, init, inputs, spec_hw, nugraph_k, wrapper=tf.wrapper,
                                      constants=call.constants)
            for cid, text, meta in made:
                add(cid, text, "candidate", meta, with_entry=False)
            report("nugraph", 1, 1, f"{len(made)} kernels")
        except Exception as exc:  # noqa: BLE001 - a reference the importer refuses: a row saying why, the rest runs
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            refused.append({"id": "nugraph", "status": "import_refused", "stage": "import", "transform": "nugraph",
                            "error": f"{type(exc).__name__}: {first}"})
            report("nugraph", 1, 1, f"refused: {type(exc).__name__}: {first}"[:120])
    if compute is not None:  # the input's Model computes in a looser dtype than its inputs: judged at that one
        for c in cands:
            if c["meta"].get("stage") != "nugraph":
                c["tolerance"] = compute
    (bundle / "manifest.json").write_text(json.dumps({"program": path.stem, "hw": spec_hw.name, "candidates": cands},
                                                     indent=1))
    (root / "prepared.json").write_text(json.dumps({
        "input": str(path.resolve()), "reference": str(ref_path.resolve()), "entry": entry, "wrapped": wrapped,
        "refused": refused, "meta": {c["id"]: c["meta"] for c in cands}, "sizes": call.note,
        "constants": call.constants, "flop": call.flop, "retarget": moved.changes}, indent=1, default=str))
    (bundle / ROWS_NAME).unlink(missing_ok=True)
    return root


def _largest_that_fits(ref_path: Path, spec: Any, xf: Any, check: Callable[[Harness], None]) -> Harness:
    """An Xe-Forge spec's largest size set that ``check`` (the memory and interpreter limits) lets through, trying
    the sets from the largest down; the smallest set's refusal when none fits."""
    from . import xeforge  # lazy: only an Xe-Forge spec needs it

    ordered = sorted(xf.sets, key=lambda s: (xeforge.input_bytes(xf, s), s.key), reverse=True)
    refusal: Exception | None = None
    for k, chosen in enumerate(ordered):
        call = harness(ref_path, spec, sizes=chosen.key)
        why = "its largest size set (--full)" if k == 0 else \
            f"its largest size set that fits here (--full; larger: {', '.join(s.key for s in ordered[:k])})"
        call = replace(call, note=call.note.rsplit("; ", 1)[0] + f"; {why}")
        try:
            check(call)
        except AxonError as exc:
            refusal = exc
            continue
        return call
    assert refusal is not None
    raise refusal


def finish(out: str | os.PathLike[str]) -> TritonResult:
    """The choice from the worker's rows in ``OUT/bundle/rows.jsonl`` (measured here or on a GPU elsewhere):
    every row, ``OUT/rows.json``, and ``OUT/best.py`` with its header."""
    root = Path(out)
    bundle = root / "bundle"
    prepared = json.loads((root / "prepared.json").read_text())
    measured = read_rows(bundle / ROWS_NAME) if (bundle / ROWS_NAME).exists() else []
    if not measured:
        raise TritonInputError(f"{bundle / ROWS_NAME}: no measurements (run python -m axon_eg.measure {bundle})")
    meta = prepared["meta"]
    rows = [dict(r) for r in measured] + prepared["refused"]
    for r in rows:  # ``stage`` is the cascade's (where a row stopped), ``transform`` the optimizer's
        r.setdefault("transform", meta.get(r["id"], {}).get("stage"))
        r.setdefault("params", meta.get(r["id"], {}).get("params"))
        if prepared.get("flop") and r.get("median_us"):  # an Xe-Forge size set's flop: the achieved rate
            r["tflops"] = prepared["flop"] / (r["median_us"] * 1e-6) / 1e12
    best, timed = _choose(rows)
    text = (bundle / f"{best}.py").read_text()
    if best in prepared["wrapped"]:  # the user's file or a stage's: without the harness's entry
        text = text.removesuffix(prepared["entry"])
    else:  # axon_eg's kernel for the reference, with its entry (it reads reference_model.py beside it)
        shutil.copyfile(prepared["reference"], root / "reference_model.py")
    applied = "none (the input was not beaten)" if best == "input" else \
        json.dumps({"stage": meta[best]["stage"], **(meta[best].get("params") or {})})
    if "make_tensor_descriptor" in text and "set_allocator" not in text:  # the harness gave it the scratch
        text += "\n\n# axon_eg: tensor descriptors made inside kernels need global scratch\n" \
                "import torch as _axon_eg_torch  # noqa: E402\nimport triton as _axon_eg_triton  # noqa: E402\n\n\n" + ALLOCATOR
    best_path = root / "best.py"
    best_path.write_text(f"# axon_eg optimize-triton: {Path(prepared['input']).name}; stage applied: {applied}\n" + text)
    (root / "rows.json").write_text(json.dumps(rows, indent=1, default=str))
    return TritonResult(best, best_path, rows, timed, bundle)


def _shared(tf: Any, ref_path: Path, init: list[Any], constants: dict[str, int],
            ref_constants: dict[str, int]) -> tuple[list[tuple[str, str, bool]], str | None]:
    """(the input's parameters matched to the reference's (:mod:`.params`), both Models built on fake tensors;
    the loosest floating dtype the input's Model holds, its compute dtype, where looser than fp32: ``fp16`` /
    ``bf16``). TritonInputError when the input's Model cannot be built that way (its parameters would be a guess)."""
    import tempfile

    from torch._subclasses.fake_tensor import FakeTensorMode

    from axon_eg.measure.harness import TOLERANCES, TORCH_DTYPES  # lazy: loads torch; importing run does not

    from .params import share, state_of  # lazy: only a Model that launches the kernels needs it

    def build(path: Path, values: dict[str, int]) -> Any:
        mod = _import(path, values)
        with FakeTensorMode(allow_non_fake_inputs=True):  # shapes and dtypes only; a .to("cuda") is fine here
            return mod.Model(*init)

    with tempfile.TemporaryDirectory() as tmp:
        mine_path = Path(tmp) / f"input_{tf.path.stem}.py"
        mine_path.write_text(tf.text)
        try:
            mine = build(mine_path, constants)
        except Exception as exc:  # noqa: BLE001 - the input's own code failed: it is not run with guessed weights
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise TritonInputError(f"{tf.path}: its Model({', '.join(map(repr, init))}) could not be built on fake "
                                   f"tensors to match its parameters to the reference's: {type(exc).__name__}: "
                                   f"{first}") from None
    theirs = build(ref_path, ref_constants)
    pairs = share(state_of(mine), state_of(theirs), f"{tf.path.name}'s Model", f"{ref_path.name}'s Model")
    names = {d: n for n, d in TORCH_DTYPES.items()}
    held = [names.get(t.dtype) for t in [*mine.parameters(), *mine.buffers()] if t.is_floating_point()]
    loose = max((d for d in held if d), key=lambda d: TOLERANCES[d], default=None)
    return pairs, loose if loose is not None and TOLERANCES[loose] > TOLERANCES["fp32"] else None


def _retargeted(text: str, vendor: str, device: str | None, path: str = "<input>") -> Any:
    """``text`` for the run's device (:mod:`.retarget`): the hardware file's vendor's GPU, or the CPU under the
    Triton interpreter (``device="cpu"``: the Triton installed here, upstream's); as it is for a target with no
    torch device of its own (Trainium). Block pointers become pointer arithmetic where the Triton installed
    here has none (:mod:`.block_pointers`)."""
    from . import block_pointers  # lazy: with libcst's transformer, only here
    from .retarget import TORCH_DEVICE, Retargeted, retarget  # lazy: as block_pointers

    if device == "cpu":
        moved = retarget(text, "nvidia", "cpu")
    elif vendor not in TORCH_DEVICE:
        moved = Retargeted(text, None, vendor)
    else:
        moved = retarget(text, vendor)
    if block_pointers.uses_block_pointers(moved.text) and not block_pointers.supported():
        # this Triton has no block pointers: the input runs only with them written as pointer arithmetic
        moved.text, changes = block_pointers.rewrite(moved.text, path=path)
        moved.changes += changes
    return moved


def _write_reference(bundle: Path, ref_path: Path, init: list[Any], constants: dict[str, int] | None = None,
                     moved: Callable[[str], str] | None = None) -> None:
    """The reference in the bundle: its file (retargeted by ``moved`` when it names another device) and the
    harness's entry."""
    text = ref_path.read_text()
    (bundle / "reference_model.py").write_text(moved(text) if moved is not None else text)
    (bundle / "reference.py").write_text(REFERENCE.format(name="reference_model.py", init=init, constants=constants or {}))


def _candidate(bundle: Path, cid: str, text: str, kind: str, inputs: list[dict], meta: dict[str, Any]) -> dict:
    (bundle / f"{cid}.py").write_text(text)
    return {"id": cid, "source": f"{cid}.py", "entry": "_axon_eg_entry", "mode": "return", "kind": kind,
            "inputs": inputs, "reference": "reference.py:reference_torch", "timeout_s": 300, "meta": meta}


def _checker(root: Path, ref_path: Path, init: list[Any], inputs: list[dict], entry: str,
             device: str | None, constants: dict[str, int] | None = None) -> Callable[[str], dict[str, Any]]:
    """The cascade on one proposal: a bundle of its own under ``root``, the worker's row."""
    counter = itertools.count()

    def check(text: str) -> dict[str, Any]:
        bundle = root / f"r{next(counter):02d}"
        if bundle.exists():
            shutil.rmtree(bundle)
        bundle.mkdir(parents=True)
        _write_reference(bundle, ref_path, init, constants)
        cand = _candidate(bundle, "proposal", text + entry, "candidate", inputs, {"stage": "proposer"})
        (bundle / "manifest.json").write_text(json.dumps({"candidates": [cand]}, indent=1))
        return _measure(bundle, device)[0]

    return check


def _measure(bundle: Path, device: str | None) -> list[dict[str, Any]]:
    return worker.run_bundle(bundle, bundle / ROWS_NAME, gpus=[] if device == "cpu" else None)


def _measured(bundle: Path, device: str | None, progress: Progress, phase: str) -> list[dict[str, Any]]:
    """``_measure``: the worker on every candidate of ``bundle`` without a row; ``progress`` hears, as the rows
    come, which candidate runs next (in the manifest's order: the order on one device) and how the last ended."""
    if progress is _quiet:
        return _measure(bundle, device)
    done = {r.get("id") for r in read_rows(bundle / ROWS_NAME)}
    todo = [c for c in load_manifest(bundle) if c["id"] not in done]
    meta = {c["id"]: _label(c) for c in todo}
    stop = threading.Event()

    def watch() -> None:
        seen = len(done)
        progress(phase, 0, len(todo), meta[todo[0]["id"]] if todo else "")
        while not stop.wait(POLL_S):
            rows = read_rows(bundle / ROWS_NAME)
            if len(rows) <= seen:
                continue
            seen, last = len(rows), rows[-1]
            n = len([r for r in rows if r.get("id") in meta])
            if n < len(todo):
                nxt = todo[n]["id"]
                progress(phase, n, len(todo), f"{meta[nxt]} (last: {last.get('id')} {last.get('status')})")

    watcher = threading.Thread(target=watch, name="axon-eg-progress", daemon=True)
    watcher.start()
    try:
        rows = _measure(bundle, device)
    finally:
        stop.set()
        watcher.join()
    counts = ", ".join(f"{k} {v}" for k, v in sorted(_count(r.get("status") for r in rows).items()))
    progress(phase, len(todo), len(todo), counts)
    return rows


POLL_S = 0.5
"""How often the progress of a measurement reads the rows written so far."""


def _label(cand: dict[str, Any]) -> str:
    """``c003 (tile_sizes)``: a candidate's id and its stage."""
    stage = (cand.get("meta") or {}).get("stage")
    return cand["id"] if stage in (None, cand["id"]) else f"{cand['id']} ({stage})"


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[str(item)] = out.get(str(item), 0) + 1
    return out


def _quiet(phase: str, done: int, total: int, detail: str) -> None:
    """No progress reports."""


def _timed(root: Path) -> bool:
    return any(r.get("median_us") for r in read_rows(root / "bundle" / ROWS_NAME))


def _choose(rows: list[dict[str, Any]]) -> tuple[str, bool]:
    """(the chosen row's id, whether anything was timed): the fastest correct row that beats the input; when the
    input itself is wrong, the fastest correct candidate (untimed: the first correct one), never the input."""
    ok = [r for r in rows if r.get("status") == "ok"]
    timed = any(r.get("median_us") for r in ok)
    base = next((r for r in ok if r["id"] == "input"), None)
    if base is None:  # the input is wrong (or did not run): any correct candidate beats it
        correct = sorted((r for r in ok if r["id"] != "input"), key=lambda r: r.get("median_us") or float("inf"))
        return (correct[0]["id"] if correct else "input"), timed
    if not timed:
        return "input", timed
    fastest = min((r for r in ok if r["id"] != "input" and r.get("median_us")), key=lambda r: r["median_us"],
                  default=None)
    if fastest is not None and fastest["median_us"] < base["median_us"]:
        return fastest["id"], timed
    return "input", timed


__all__ = ["PHASES", "Harness", "TritonResult", "combine", "finish", "optimize_triton", "prepare"]
