"""NKI lowering synthesis: tile-level ops to Trainium instruction sequences, searched and proven, never asserted.

For every tile-level op (:func:`tile_ops`), sketches with holes (instruction choice, activation function,
operand order and reverse flags, engine, transposes, stationary vs moving operand, PSUM evacuation,
accumulation) are enumerated (:mod:`.synthesis_space`); each candidate goes to the prover
(``semantics.isa.prove_lowering``, the pipeline of ``prove_equal`` with instructions on one side), and
only proven ones are admitted. Instruction fusions are discovered the same way
(:mod:`.synthesis_fusion`). Admitted lowerings and fusions are data with proof records
(:mod:`.synthesis_store`, ``data/*.json``), checked on load and reused; :func:`discover` regenerates
them, :func:`verify` re-proves them.

Query API for the emitter::

    lower(TileOp("exp", ("tile",)), "trn2")                  # every admitted sequence, cheapest first
    lower(op, "trn1", sizes={"P": 128, "F": 512})            # only those within the limits of trn1
    fuse(sequence, "trn2")                                   # apply admitted fusion rules
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from axon_eg import hw
from axon_eg.semantics.isa import Instr, Machine, prove_lowering, prove_same
from axon_eg.semantics.prover import ProofResult

from .synthesis_fusion import SCALARS, discover_fusions
from .synthesis_fusion import fuse as _fuse
from .synthesis_space import (
    Sketch,
    TileOp,
    describe,
    engine_choices,
    refinements,
    sketches,
    tile_ops,
    tile_spec,
    uses_every_operand,
    with_engines,
)
from .synthesis_store import (
    DATA,
    clear_cache,
    cost_of,
    fusion_inputs,
    instances,
    instantiate,
    load,
    lowering_cost_key,
    lowering_entry,
    rejected_row,
    sequence_of,
    write,
)

__all__ = ["Lowering", "Summary", "TileOp", "discover", "fuse", "fusion_rules", "lower", "tile_ops", "verify"]


@dataclass(frozen=True)
class Lowering:
    """One admitted instruction sequence for a tile op; ``conditions`` are what it needs to run."""

    tile_op: TileOp
    sequence: tuple[Instr, ...]
    conditions: Mapping[str, Any]
    cost: Mapping[str, Any]
    name: str
    proof: Mapping[str, Any]

    def __str__(self) -> str:
        return "; ".join(map(str, self.sequence))

    def __hash__(self) -> int:
        return hash((self.name, self.sequence))


def _size(expr: str, sizes: Mapping[str, int]) -> int | None:
    if expr.lstrip("-").isdigit():
        return int(expr)
    return sizes.get(expr)


def fits(conditions: Mapping[str, Any], spec: hw.HardwareSpec, sizes: Mapping[str, int] | None = None,
         dtypes: Mapping[str, int] | None = None) -> bool:
    """Whether a sequence with these conditions runs on the target: its features, and, when sizes
    (dim -> size) and dtypes (tile -> bytes per element) are given, its limits and dtype rules."""
    if any(not spec.get(f"features.{f}", False) for f in conditions["features"]):
        return False
    for expr, key in conditions["limits"] if sizes else ():
        value = _size(expr, sizes)
        if value is not None and value > spec.value(key):
            return False
    for tile, nbytes in conditions["dtype_bytes"] if dtypes else ():
        if tile in dtypes and dtypes[tile] != nbytes:
            return False
    return True


def lower(tile_op: TileOp, target: str, *, sizes: Mapping[str, int] | None = None,
          dtypes: Mapping[str, int] | None = None, directory: Path = DATA) -> list[Lowering]:
    """The admitted instruction sequences for ``tile_op`` on ``target`` (a hardware-description name),
    cheapest first (instructions, then engines, then DMAs, then name: a deterministic order)."""
    spec = hw.load(target)
    lowerings, _ = load(directory)
    found = []
    for e in lowerings:
        if e["tile_op"] != tile_op.to_json() or not fits(e["conditions"], spec, sizes, dtypes):
            continue
        base = sequence_of(e)
        for picks in [None, *e["engines"]]:  # the engines as written first, then the proven alternatives
            sequence = base if picks is None else with_engines(base, picks)
            found.append((picks is not None, Lowering(tile_op, sequence, e["conditions"], cost_of(sequence), e["name"],
                                                      e["proof"])))
    return [lw for _, lw in sorted(found, key=lambda f: lowering_cost_key(f[1].cost, f[0], str(f[1])))]


def fusion_rules(target: str, directory: Path = DATA) -> list[Mapping[str, Any]]:
    """The admitted fusion rules whose fused instruction exists on ``target``."""
    spec = hw.load(target)
    _, rules = load(directory)
    return [r for r in rules if all(spec.get(f"features.{f}", False) for f in r["conditions"]["features"])]


def fuse(sequence: tuple[Instr, ...], target: str, *, keep: tuple[str, ...] = ("out",),
         directory: Path = DATA) -> tuple[Instr, ...]:
    """``sequence`` with admitted fusion rules applied to adjacent pairs (tiles in ``keep`` stay written)."""
    spec = hw.load(target)
    features = {k.split(".", 1)[1] for k in spec.keys() if k.startswith("features.") and spec.value(k) is True}
    return _fuse(sequence, fusion_rules(target, directory), features, keep)


# -- discovery -------------------------------------------------------------------------------------
@dataclass
class Summary:
    lowerings: dict[str, dict[str, int]] = field(default_factory=dict)  # tile op -> counts
    fusions: dict[str, dict[str, int]] = field(default_factory=dict)  # instruction pair -> counts
    lowering_seconds: float = 0.0
    fusion_seconds: float = 0.0

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for counts in self.lowerings.values():
            for k, v in counts.items():
                out[k] = out.get(k, 0) + v
        return out


_TASKS: list[tuple[TileOp, Sketch]] = []  # what the forked workers prove, by index


def _prove_task(i: int) -> tuple[int, ProofResult]:
    op, sketch = _TASKS[i]
    spec = tile_spec(op)
    return i, prove_lowering(spec.program, spec.inputs, sketch.sequence, symbols=spec.symbols)[0]


def _prove(tasks: list[tuple[TileOp, Sketch]], jobs: int) -> list[ProofResult]:
    global _TASKS
    _TASKS = tasks
    results: list[Any] = [None] * len(tasks)
    try:
        if jobs > 1 and len(tasks) > 100:
            with multiprocessing.get_context("fork").Pool(jobs) as pool:
                for i, r in pool.imap_unordered(_prove_task, range(len(tasks)), chunksize=64):
                    results[i] = r
        else:
            results = [_prove_task(i)[1] for i in range(len(tasks))]
    finally:
        _TASKS = []
    return results


def discover(*, jobs: int = 2, write_store: bool = True, directory: Path = DATA,
             progress: Callable[[str], Any] | None = None) -> Summary:
    """Enumerate, prove and store every lowering and fusion (regenerates ``data/*.json``).

    Three stages for lowerings: the sketches (value holes); the secondary holes of proven ones
    (accumulator start, PSUM evacuation: :func:`refinements`); the engines of every proven sequence
    (:func:`engine_choices`). A sketch that ignores an operand of the tile op is pruned unproved."""
    summary = Summary()
    start = time.perf_counter()
    counts = {op.key: {"enumerated": 0, "pruned": 0, "proven": 0, "refuted": 0, "illegal": 0, "unknown": 0}
              for op in tile_ops()}
    summary.lowerings = counts
    primary = []
    for op in tile_ops():
        for sketch in sketches(op):
            counts[op.key]["enumerated"] += 1
            if uses_every_operand(op, sketch.sequence):
                primary.append((op, sketch))
            else:
                counts[op.key]["pruned"] += 1
    primary_results = _prove(primary, jobs)
    refined = [(op, more) for (op, sketch), r in zip(primary, primary_results) if r.proven
               for more in refinements(op, sketch)]
    base, results = primary + refined, primary_results + _prove(refined, jobs)
    variants = [(k, picks) for k, ((_, sketch), r) in enumerate(zip(base, results)) if r.proven
                for picks in engine_choices(sketch.sequence)]
    moved = [(base[k][0], Sketch(base[k][1].family, (*base[k][1].holes, ("engines", picks)),
                                 with_engines(base[k][1].sequence, picks))) for k, picks in variants]
    engines: dict[int, list[tuple[str | None, ...]]] = {}
    admitted: list[dict] = []
    rejected: list[dict] = []
    for (k, picks), (op, sketch), r in zip(variants, moved, _prove(moved, jobs)):
        counts[op.key][r.status] += 1
        if r.proven:
            engines.setdefault(k, []).append(picks)
        else:
            rejected.append(rejected_row(op.key, describe(sketch), r))
    for op, _ in refined + moved:
        counts[op.key]["enumerated"] += 1
    for k, ((op, sketch), r) in enumerate(zip(base, results)):
        counts[op.key][r.status] += 1
        if r.proven:
            spec = tile_spec(op)
            machine = Machine(spec.inputs, [s.name for s in spec.symbols]).run(sketch.sequence)
            admitted.append(lowering_entry(op, sketch.family, sketch.holes, sketch.sequence, r, machine,
                                           engines.get(k, [])))
        else:
            rejected.append(rejected_row(op.key, describe(sketch), r))
    summary.lowering_seconds = time.perf_counter() - start
    if progress:
        progress(f"lowerings: {len(admitted)} admitted in {summary.lowering_seconds:.1f} s")
    start = time.perf_counter()
    fusions, fusion_rejected, summary.fusions = discover_fusions()
    summary.fusion_seconds = time.perf_counter() - start
    if progress:
        progress(f"fusions: {len(fusions)} admitted in {summary.fusion_seconds:.1f} s")
    if write_store:
        write(admitted, fusions, rejected + fusion_rejected,
              {"lowerings": summary.lowerings, "fusions": summary.fusions}, directory)
        clear_cache()
    return summary


def verify(directory: Path = DATA, timeout_ms: int = 4000) -> tuple[list[tuple[str, str]], int, float]:
    """Re-prove every stored lowering and every instance of every fusion rule:
    (failures as (entry, reason), number of entries, seconds)."""
    start = time.perf_counter()
    lowerings, rules = load(directory)
    failures: list[tuple[str, str]] = []
    for e in lowerings:
        spec = tile_spec(TileOp.from_json(e["tile_op"]))
        base = sequence_of(e)
        for picks in [None, *e["engines"]]:
            sequence = base if picks is None else with_engines(base, picks)
            r, _ = prove_lowering(spec.program, spec.inputs, sequence, symbols=spec.symbols, timeout_ms=timeout_ms)
            if not r.proven:
                failures.append((e["name"], f"engines {picks}: re-proof gave {r.status} ({r.method}: {r.detail})"))
    for rule in rules:
        inputs = fusion_inputs(rule)
        for inst in instances(rule):
            r = prove_same(inputs, instantiate(rule["pair"], inst), instantiate(rule["fused"], inst), rule["outputs"],
                           scalars=SCALARS, timeout_ms=timeout_ms)
            if not r.proven:
                failures.append((rule["name"], f"instance {inst}: re-proof gave {r.status} ({r.method}: {r.detail})"))
                break
    return failures, len(lowerings) + len(rules), time.perf_counter() - start
