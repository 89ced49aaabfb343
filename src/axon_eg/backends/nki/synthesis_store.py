"""The store of admitted NKI lowerings and instruction fusions: JSON data with proof records.

``data/lowerings.json`` holds one entry per admitted (tile op, instruction sequence): the tile op, the
sketch family and holes it came from, the sequence, the conditions under which it runs (target
features, size limits as hardware-description keys, dtypes), its cost and its proof record (status,
method, solver, seconds, lemmas, the hash of the semantics it was proved against); ``data/fusions.json``
one entry per admitted fusion rule (the instruction pair, the fused instruction, the instances it was
proved for); ``data/rejected.json`` every refuted, illegal or unknown candidate with its
counterexample or reason, one line each. Every entry carries a digest of its contents.

The loader refuses, naming the entry, one without a proof, proved against other semantics, whose
digest does not match, or whose conditions and cost do not follow from its sequence (re-derived by
running the sequence symbolically); :func:`verify` re-proves every entry. Proof records, digests and
the semantics hash they are checked against are :mod:`axon_eg.proofs`'s, shared with the rule store.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from axon_eg.errors import AxonError
from axon_eg.proofs import check_proof_record, digest, isa_semantics_hash, record
from axon_eg.semantics.isa import IllFormed, Instr, Machine, TileType, engine
from axon_eg.semantics.isa.instructions import _freeze, parse_dim
from axon_eg.semantics.prover import ProofResult

from .synthesis_space import TileOp, tile_spec, with_engines

DATA = Path(__file__).resolve().parent / "data"


class LoweringStoreError(AxonError):
    """A stored lowering or fusion that cannot be trusted (no proof, stale semantics, edited, malformed)."""


def to_json(v: Any) -> Any:
    if isinstance(v, tuple):
        return [to_json(x) for x in v]
    return v


def proof_record(r: ProofResult, instances: int | None = None) -> dict[str, Any]:
    return record(r, isa_semantics_hash(), **({} if instances is None else {"instances": instances}))


def conditions_of(m: Machine) -> dict[str, Any]:
    """What a sequence needs to run, as data ``lower`` checks against a target and sizes."""
    return {"features": sorted(m.features), "limits": sorted([repr(e), k] for e, k in m.limits),
            "dtype_bytes": sorted([t, n] for t, n in m.dtype_bytes)}


def cost_of(sequence: Sequence[Instr]) -> dict[str, Any]:
    """The ranking cost: number of instructions, then the engines they occupy (fewer first)."""
    engines = [engine(i) for i in sequence]
    return {"instructions": len(sequence), "engines": sorted(set(engines)), "dma": engines.count("dma")}


def lowering_cost_key(cost: dict[str, Any], moved: bool, text: str) -> tuple:
    """Cheapest first: fewer instructions, then fewer engines, then fewer DMAs, then engines as
    written before moved ones, then the text (a deterministic order)."""
    return (cost["instructions"], len(cost["engines"]), cost["dma"], moved, text)


def lowering_entry(op: TileOp, family: str, holes: Iterable[tuple[str, Any]], sequence: Sequence[Instr],
                   proof: ProofResult, machine: Machine, engines: Sequence[Sequence[str | None]] = ()) -> dict[str, Any]:
    """One admitted lowering; ``engines`` are the other engine assignments proven for it (None: as written)."""
    entry = {
        "name": f"{op.key} :: " + "; ".join(map(str, sequence)),
        "tile_op": op.to_json(),
        "family": family,
        "holes": {k: to_json(v) for k, v in holes},
        "sequence": [i.to_json() for i in sequence],
        "conditions": conditions_of(machine),
        "cost": cost_of(sequence),
        "engines": [list(p) for p in engines],
        "proof": proof_record(proof, instances=1 + len(engines)),
    }
    entry["digest"] = digest(entry)
    return entry


def rejected_entry(kind: str, name: str, r: ProofResult) -> dict[str, Any]:
    return {"kind": kind, "name": name, "status": r.status, "method": r.method,
            "detail": str(r.counterexample) if r.counterexample else r.detail}


def rejected_row(tile_op: str, sketch: str, r: ProofResult) -> dict[str, Any]:
    """A refuted (counterexample), illegal (why) or unknown lowering candidate, named by its sketch."""
    return {"kind": "lowering", "tile_op": tile_op, "row": [sketch, r.status,
                                                            str(r.counterexample) if r.counterexample else r.detail]}


def _atomic_write(path: Path, text: str) -> Path:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def _one_per_line(entries: list[dict], extra: dict[str, Any]) -> str:
    head = "".join(f' {json.dumps(k)}: {json.dumps(v, sort_keys=True)},\n' for k, v in sorted(extra.items()))
    body = ",\n".join("  " + json.dumps(e, sort_keys=True) for e in entries)
    return "{\n" + head + ' "entries": [\n' + body + "\n ]\n}\n"


def write(lowerings: list[dict], fusions: list[dict], rejected: list[dict], summary: dict[str, Any],
          directory: Path = DATA) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [
        _atomic_write(directory / "lowerings.json", _one_per_line(sorted(lowerings, key=lambda e: e["name"]),
                                                                  {"sketches": summary["lowerings"]})),
        _atomic_write(directory / "fusions.json", json.dumps(
            {"entries": sorted(fusions, key=lambda e: e["name"]), "proposals": summary["fusions"]},
            indent=1, sort_keys=True) + "\n"),
        _atomic_write(directory / "rejected.json", _rejected_text(rejected)),
    ]


def _rejected_text(rejected: list[dict]) -> str:
    """Rejected lowerings as rows [sketch, status, counterexample or reason] under their tile op, then
    rejected fusions: one line each."""
    by_op: dict[str, list] = {}
    for e in rejected:
        if e["kind"] == "lowering":
            by_op.setdefault(e["tile_op"], []).append(e["row"])
    fusions = sorted((e for e in rejected if e["kind"] == "fusion"), key=lambda e: e["name"])
    parts = []
    for key in sorted(by_op):
        rows = ",\n".join("   " + json.dumps(r) for r in sorted(by_op[key]))
        parts.append(f"  {json.dumps(key)}: [\n{rows}\n  ]")
    fusion_rows = ",\n".join("  " + json.dumps(e, sort_keys=True) for e in fusions)
    return ('{\n "fusions": [\n' + fusion_rows + '\n ],\n "lowerings": {\n' + ",\n".join(parts) + "\n }\n}\n")


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise LoweringStoreError(f"{path} is missing; run axon_eg.backends.nki.synthesis.discover()") from None
    except json.JSONDecodeError as e:
        raise LoweringStoreError(f"{path}: not valid JSON ({e})") from None


def _check_proof(entry: dict[str, Any], where: str) -> None:
    check_proof_record(entry, where, isa_semantics_hash(), LoweringStoreError, "synthesis.discover()")


def sequence_of(entry: dict[str, Any]) -> tuple[Instr, ...]:
    return tuple(Instr.from_json(d) for d in entry["sequence"])


def check_lowering(entry: dict[str, Any], where: str = "lowerings.json") -> dict[str, Any]:
    _check_proof(entry, where)
    name = entry["name"]
    try:
        op = TileOp.from_json(entry["tile_op"])
        spec = tile_spec(op)
        sequence = sequence_of(entry)
        machine = Machine(spec.inputs, [s.name for s in spec.symbols]).run(sequence)
    except (AxonError, KeyError, TypeError, ValueError) as e:
        raise LoweringStoreError(f"{name} in {where}: malformed ({e})") from None
    for picks in entry.get("engines", []):
        try:
            Machine(spec.inputs, [s.name for s in spec.symbols]).run(with_engines(sequence, picks))
        except (IllFormed, TypeError, ValueError) as e:
            raise LoweringStoreError(f"{name} in {where}: engine choice {picks} does not run ({e})") from None
    if conditions_of(machine) != entry["conditions"] or cost_of(sequence) != entry["cost"]:
        raise LoweringStoreError(f"{name} in {where}: its conditions or cost do not follow from its sequence")
    if "out" not in machine.types or entry["name"] != f"{op.key} :: " + "; ".join(map(str, sequence)):
        raise LoweringStoreError(f"{name} in {where}: its name does not follow from its tile op and sequence")
    return entry


def fusion_inputs(entry: dict[str, Any]) -> dict[str, TileType]:
    return {n: TileType(tuple(parse_dim(d) for d in t["shape"]), t["space"]) for n, t in entry["inputs"].items()}


def check_fusion(entry: dict[str, Any], where: str = "fusions.json") -> dict[str, Any]:
    _check_proof(entry, where)
    try:
        inputs = fusion_inputs(entry)
        for inst in instances(entry):
            for side in ("pair", "fused"):
                Machine(inputs, entry["scalars"]).run(instantiate(entry[side], inst))
    except IllFormed as e:
        raise LoweringStoreError(f"{entry['name']} in {where}: an instance does not run ({e})") from None
    except (AxonError, KeyError, TypeError, ValueError) as e:
        raise LoweringStoreError(f"{entry['name']} in {where}: malformed ({e})") from None
    return entry


@cache
def _load(directory: str, stamp: tuple) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    d = Path(directory)
    lowerings = tuple(check_lowering(e) for e in _read(d / "lowerings.json").get("entries", []))
    fusions = tuple(check_fusion(e) for e in _read(d / "fusions.json").get("entries", []))
    return lowerings, fusions


def clear_cache() -> None:
    _load.cache_clear()


def load(directory: Path = DATA) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """(admitted lowerings, admitted fusion rules), each checked; LoweringStoreError names a bad one.
    Cached per directory and file versions (a rewritten file is checked again)."""
    stamp = tuple((p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else None
                  for p in (directory / "lowerings.json", directory / "fusions.json"))
    return _load(str(directory), stamp)


def summary(directory: Path = DATA) -> dict[str, Any]:
    return {"lowerings": _read(directory / "lowerings.json").get("sketches", {}),
            "fusions": _read(directory / "fusions.json").get("proposals", {})}


def _substitute(v: Any, inst: Mapping[str, Any]) -> Any:
    if isinstance(v, str) and v.startswith("?"):
        return inst[v]
    if isinstance(v, tuple):
        return tuple(_substitute(x, inst) for x in v)
    return v


def instantiate(templates: Sequence[Any], inst: Mapping[str, Any]) -> tuple[Instr, ...]:
    """Instructions (or their JSON) with every ``?variable`` replaced; arguments that become None drop."""
    out = []
    for t in templates:
        ins = t if isinstance(t, Instr) else Instr.from_json(t)
        args = {k: _substitute(v, inst) for k, v in ins.args}
        out.append(Instr.of(ins.op, ins.dst, space=ins.space, **args))
    return tuple(out)


def instances(entry: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The variable assignments a stored fusion rule was proved for."""
    names = sorted(entry["variables"])
    if entry["instances"] == "all":
        rows: Any = itertools.product(*(entry["variables"][n] for n in names))
    else:
        rows = entry["instances"]
    for row in rows:
        yield {n: _freeze(v) for n, v in zip(names, row)}
