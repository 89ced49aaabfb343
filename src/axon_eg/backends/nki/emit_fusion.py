"""Instruction fusion on an emitted kernel body: the admitted (Z3-proven) fusion rules of ``data/fusions.json``.

A producer instruction and the first instruction after it that reads its tile (same loop body, nothing in
between that reads the tile or overwrites the producer's operands) are matched against every admitted rule
of the target (:func:`.synthesis.fusion_rules`: a rule whose fused instruction needs a feature the chip
lacks, such as ``dma_transpose`` on trn1, is never offered); a rule whose pair drops the producer's tile
applies only when nothing later reads it. The fused instruction takes the consumer's place (its
destination, shape and dtype) and a comment names the rule. Rules that fire on the suite:

- ``activation + tensor_reduce -> activation(reduce_res=...)``: a row sum of an activation's output on the
  Scalar engine's reduce registers (softmax, log-softmax, attention's row sums);
- ``tensor_scalar + tensor_scalar -> tensor_scalar(op0, op1)``: two ALU ops in one pass (attention's
  ``l * alpha + rowsum``, layernorm's ``(x - mean) * rstd``);
- ``tensor_scalar + activation -> activation(scale=..., bias=...)``: a multiply folded into the
  activation's scale (an add into its bias when the addend is a [P, 1] tile);
- ``dma_copy + nc_transpose -> dma_transpose`` (trn2 and later; 2-byte dtypes), then
  ``dma_transpose + tensor_copy -> dma_transpose``;
- copy elimination: ``X + tensor_copy -> X`` writing the copy's destination (concat parts, PSUM evacuation
  casts) and ``tensor_copy + X -> X`` reading the copy's source.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from axon_eg import hw
from axon_eg.semantics.isa import Instr

from . import isa as nki_isa
from .emit_writer import Emitted, base
from .synthesis import fusion_rules
from .synthesis_fusion import _fuse_pair

_TWO_BYTE = ("nl.bfloat16", "nl.float16")


def _depth(line: str) -> int:
    return (len(line) - len(line.lstrip(" "))) // 4


def _mentions(line: str | Emitted, var: str) -> bool:
    if isinstance(line, str):
        return re.search(rf"\b{re.escape(var)}\b", line) is not None
    names = [v for v in line.args.values() if isinstance(v, str)] + [line.dst, *line.extra.values()]
    return any(base(v) == var or re.search(rf"\b{re.escape(var)}\b", v) for v in names)


def _consumer(lines: Sequence[str | Emitted], i: int) -> int | None:
    """The index of the first instruction after ``lines[i]`` that reads its tile, if nothing in between
    prevents moving the pair's work there."""
    p = lines[i]
    assert isinstance(p, Emitted)
    var, inputs = base(p.dst), p.reads()
    for j in range(i + 1, len(lines)):
        e = lines[j]
        if isinstance(e, str):
            text = e.strip()
            if _depth(e) != p.depth or text.endswith(":") or _mentions(e, var) or any(_mentions(e, x) for x in inputs):
                if not text.startswith("#"):
                    return None
            continue
        if e.depth != p.depth:
            return None
        if var in e.reads():
            return j
        if base(e.dst) in inputs or base(e.dst) == var or _mentions(e, var):
            return None
    return None


def _read_after(lines: Sequence[str | Emitted], j: int, var: str) -> bool:
    return any(_mentions(e, var) and not (isinstance(e, str) and e.strip().startswith("#")) for e in lines[j + 1:])


def _forms(e: Emitted) -> list[Instr]:
    """The instruction as written and, without an engine argument, with its default engine spelled out
    (a rule proved for every engine of a template matches either)."""
    ins = Instr.of(e.op, e.dst, **e.args)
    if "engine" in e.args:
        return [ins]
    return [ins, ins.replace(engine=nki_isa.get(e.op).engines[0])]


def _number(v: Any) -> float | None:
    """The value of an immediate expression (``("recip", ("imm", 2.0))`` -> 0.5); None for anything else."""
    if not isinstance(v, tuple) or not v:
        return None
    if v[0] == "imm":
        return float(v[1])
    inner = [_number(x) for x in v[1:]]
    if any(x is None for x in inner):
        return None
    return {"neg": lambda: -inner[0], "recip": lambda: 1.0 / inner[0],
            "mul": lambda: inner[0] * inner[1]}.get(v[0], lambda: None)()


def _emitted(fused: Instr, p: Emitted, c: Emitted, rule: str) -> Emitted | None:
    args: dict[str, Any] = {}
    for key, v in fused.args:
        if isinstance(v, tuple):
            number = _number(v)
            if number is None:
                return None  # e.g. the reciprocal of a tile: not an immediate the emitter can write
            args[key] = ("imm", number)
        else:
            args[key] = v
    short = rule.split(" ->")[0]
    note = f"fused ({short} -> {fused.op}, a proven instruction-fusion rule)"
    if fused.dst == p.dst:  # the producer keeps its tile and also writes the consumer's (reduce_res)
        extra = {k: v for k, v in args.items() if k == "reduce_res"}
        return Emitted(p.depth, fused.op, p.dst, args, p.shape, p.dtype, p.buffer, extra, note)
    buffer = "sbuf" if fused.op.startswith("dma") else c.buffer
    return Emitted(c.depth, fused.op, c.dst, args, c.shape, c.dtype, buffer, dict(c.extra), note)


def _dtypes_ok(rule: Mapping[str, Any], p: Emitted, c: Emitted, fused: Instr) -> bool:
    if fused.op.startswith("dma") and p.dtype != c.dtype:  # a DMA does not cast here (dma_transpose never does)
        return False
    return all(nbytes != 2 or p.dtype in _TWO_BYTE for _, nbytes in rule["conditions"]["dtype_bytes"])


def fuse(lines: list[str | Emitted], target: str) -> list[str]:
    """Apply the admitted fusion rules of ``target`` to ``lines`` in place until none applies; returns the
    names of the rules that fired, one per fusion."""
    spec = hw.load(target)
    features = {k.split(".", 1)[1] for k in spec.keys() if k.startswith("features.") and spec.value(k) is True}
    rules = fusion_rules(target)
    fired: list[str] = []
    changed = True
    while changed:
        changed = False
        for i, p in enumerate(lines):
            if not isinstance(p, Emitted) or p.pinned:
                continue
            j = _consumer(lines, i)
            if j is None:
                continue
            c = lines[j]
            assert isinstance(c, Emitted)
            if c.pinned:
                continue
            keep = (p.dst,) if "[" in p.dst or _read_after(lines, j, base(p.dst)) else ()
            for rule in rules:
                fused = next((f for a in _forms(p) for b in _forms(c)
                              if (f := _fuse_pair(a, b, (), [rule], features, keep)) is not None), None)
                if fused is None or not _dtypes_ok(rule, p, c, fused):
                    continue
                new = _emitted(fused, p, c, rule["name"])
                if new is None:
                    continue
                lines[j] = new
                del lines[i]
                fired.append(rule["name"])
                changed = True
                break
            if changed:
                break
    return fired
