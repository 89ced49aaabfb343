"""Instruction fusion, discovered and proven the way lowerings are.

Pairs: every producer template (an instruction writing tile ``t``) followed by every consumer template
(an instruction reading ``t`` and writing ``y``). A template's attributes are variables over finite
domains (``?o1`` over the ALU ops, ``?r1`` over reverse flags, ``?e`` over engines, ``?u`` over a
[P, 1] tile or a compile-time scalar ...); an activation's function is ``any``, an uninterpreted
function, so a proof covers every activation function at once.

Proposals: single instructions built from the pair's own operands and attributes: the consumer
reading the producer's input (the producer was a copy), the producer alone, a DMA transpose for a
DMA followed by a transpose, ``tensor_scalar`` with the pair's two (op, operand, reverse) slots in
either order and either reverse flag, ``activation`` with the producer's scale or operand (or its
reciprocal) as scale, a bias taken from either side, and the consumer's reduction. Each proposal is a
schema over the pair's variables, proved for every instance (``prove_same``). A schema is admitted
with the instances where it is proven, unless an earlier admitted schema of the same pair already
covers them (then it is ``subsumed``); its first failing instance is kept with its counterexample.
:func:`fuse` applies admitted rules to a sequence.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from axon_eg.semantics.isa import ALU, ANY_FUNCTION, REDUCE_OPS, Instr, Machine, TileType, prove_same
from axon_eg.semantics.isa.instructions import is_immediate, parse_dim
from axon_eg.semantics.prover import ProofResult

from .synthesis_store import conditions_of, digest, instances, instantiate, proof_record, rejected_entry, to_json

TILE = ("P", "F")
ROW = ("P", 1)
SCALARS = {"c": 0.7}


@dataclass(frozen=True)
class Template:
    instr: Instr
    variables: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    inputs: tuple[tuple[str, tuple[Any, ...], str], ...] = ()  # (tile, shape, memory)


PRODUCERS = (
    Template(Instr.of("dma_copy", "t", src="x"), (), (("x", TILE, "hbm"),)),
    Template(Instr.of("tensor_copy", "t", src="x", engine="?pe"), (("?pe", ("vector", "scalar", "gpsimd")),),
             (("x", TILE, "sbuf"),)),
    Template(Instr.of("activation", "t", op="?f", data="x", scale="?k", bias="?b"),
             (("?b", (None, "b")), ("?f", (ANY_FUNCTION,)), ("?k", (None, "s"))),
             (("x", TILE, "sbuf"), ("s", ROW, "sbuf"), ("b", ROW, "sbuf"))),
    Template(Instr.of("tensor_scalar", "t", data="x", op0="?o1", operand0="?u", reverse0="?r1"),
             (("?o1", tuple(ALU)), ("?r1", (False, True)), ("?u", ("u", ("scalar", "c")))),
             (("x", TILE, "sbuf"), ("u", ROW, "sbuf"))),
    Template(Instr.of("dma_transpose", "t", src="x"), (), (("x", TILE, "hbm"),)),
)
CONSUMERS = (
    Template(Instr.of("nc_transpose", "y", data="t", engine="?e"), (("?e", ("tensor", "vector")),)),
    Template(Instr.of("tensor_reduce", "y", op="?ro", data="t", axis=1, keepdims=True), (("?ro", tuple(REDUCE_OPS)),)),
    Template(Instr.of("tensor_scalar", "y", data="t", op0="?o2", operand0="w", reverse0="?r2"),
             (("?o2", tuple(ALU)), ("?r2", (False, True))), (("w", ROW, "sbuf"),)),
    Template(Instr.of("activation", "y", op="?g", data="t", bias="?c"), (("?c", (None, "b2")), ("?g", (ANY_FUNCTION, "copy"))),
             (("b2", ROW, "sbuf"),)),
    Template(Instr.of("tensor_copy", "y", src="t")),  # a copy after the producer: write y directly (copy elimination)
)


# -- proposals -------------------------------------------------------------------------------------
def _input(ins: Instr) -> str:
    return ins.arg("src") if ins.arg("src") is not None else ins.arg("data")


def _unique(items: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def proposals(p: Instr, c: Instr) -> list[Instr]:
    """Single instructions that might do what ``p`` then ``c`` do (holes filled from the pair)."""
    src = _input(p)
    out = [Instr.of(c.op, c.dst, space=c.space, **{k: (src if v == "t" else v) for k, v in c.args}),  # bypass p
           Instr.of(p.op, c.dst, **dict(p.args))]  # p alone
    if p.op in ("dma_copy", "load") and c.op == "nc_transpose":
        out.append(Instr.of("dma_transpose", c.dst, src=src))
    slots = [(i.arg("op0"), i.arg("operand0"), i.arg("reverse0")) for i in (p, c) if i.op == "tensor_scalar"]
    flags = _unique([s[2] for s in slots])
    for first, second in itertools.permutations([*slots, None], 2):
        if first is None:
            continue
        for r0, r1 in itertools.product(flags, flags if second else [None]):
            args = {"op0": first[0], "operand0": first[1], "reverse0": r0}
            if second:
                args.update(op1=second[0], operand1=second[1], reverse1=r1)
            out.append(Instr.of("tensor_scalar", c.dst, data=src, **args))
    functions = [i.arg("op") for i in (p, c) if i.op == "activation"]
    operands = [i.arg("operand0") for i in (p, c) if i.op == "tensor_scalar"]
    scales = _unique([p.arg("scale") if p.op == "activation" else None, None, *operands,
                      *(("recip", u) for u in operands)])
    biases = _unique([p.arg("bias") if p.op == "activation" else None, None, c.arg("bias") if c.op == "activation" else None,
                      *operands])
    for f, scale, bias in itertools.product(_unique(functions), scales, biases):
        if c.op == "tensor_reduce":
            out.append(Instr.of("activation", p.dst, op=f, data=src, scale=scale, bias=bias, reduce_op=c.arg("op"),
                                reduce_res=c.dst, reduce_cmd="reset_reduce"))
        else:
            out.append(Instr.of("activation", c.dst, op=f, data=src, scale=scale, bias=bias))
    return _unique(out)


@dataclass
class Schema:
    name: str
    pair: tuple[Instr, Instr]
    fused: Instr
    variables: dict[str, tuple[Any, ...]]
    inputs: dict[str, TileType]
    input_json: dict[str, Any]
    proven: list[tuple[Any, ...]]
    seconds: float = 0.0
    methods: set[str] = field(default_factory=set)
    failure: Any = None  # (instance, ProofResult) of the first instance not proven
    machine: Any = None

    @property
    def outputs(self) -> list[str]:
        return ["y"] + (["t"] if self.fused.dst == "t" else [])


def pairs() -> Iterator[tuple[Template, Template]]:
    yield from itertools.product(PRODUCERS, CONSUMERS)


def schemas() -> Iterator[Schema]:
    for p, c in pairs():
        variables = dict(sorted({**dict(p.variables), **dict(c.variables)}.items()))
        tiles = {n: (shape, space) for n, shape, space in (*p.inputs, *c.inputs)}
        inputs = {n: TileType(tuple(parse_dim(d) for d in shape), space) for n, (shape, space) in tiles.items()}
        input_json = {n: {"shape": list(shape), "space": space} for n, (shape, space) in tiles.items()}
        for fused in proposals(p.instr, c.instr):
            name = f"{p.instr.op}+{c.instr.op} -> {fused}"
            yield Schema(name, (p.instr, c.instr), fused, variables, inputs, input_json, [])


def prove_schema(s: Schema, timeout_ms: int = 2000) -> Schema:
    """Prove the schema instance by instance (in a fixed order); remember the first failure."""
    names = list(s.variables)
    for row in itertools.product(*(s.variables[n] for n in names)):
        inst = dict(zip(names, row))
        left = instantiate(s.pair, inst)
        right = instantiate([s.fused], inst)
        r = prove_same(s.inputs, left, right, s.outputs, scalars=SCALARS, timeout_ms=timeout_ms)
        s.seconds += r.seconds
        if r.proven:
            s.proven.append(row)
            s.methods.add(r.method)
            m = Machine(s.inputs, SCALARS).run(right)  # conditions: those of every proven instance
            if s.machine is None:
                s.machine = m
            else:
                s.machine.limits |= m.limits
                s.machine.features |= m.features
                s.machine.dtype_bytes |= m.dtype_bytes
        elif s.failure is None:
            s.failure = (inst, r)
    return s


def fusion_entry(s: Schema) -> dict[str, Any]:
    full = len(s.proven) == _count(s.variables)
    conditions = conditions_of(s.machine)
    conditions["dead"] = [] if "t" in s.outputs else ["t"]  # the pair's intermediate must have no other reader
    entry = {
        "name": s.name,
        "pair": [i.to_json() for i in s.pair],
        "fused": [s.fused.to_json()],
        "inputs": s.input_json,
        "scalars": SCALARS,
        "outputs": s.outputs,
        "variables": {k: [to_json(v) for v in vs] for k, vs in s.variables.items()},
        "instances": "all" if full else [[to_json(v) for v in row] for row in s.proven],
        "conditions": conditions,
        "proof": proof_record(_summary_result(s), instances=len(s.proven)),
    }
    entry["digest"] = digest(entry)
    return entry


def _count(variables: Mapping[str, Sequence[Any]]) -> int:
    n = 1
    for vs in variables.values():
        n *= len(vs)
    return n


def _summary_result(s: Schema) -> Any:
    return ProofResult("proven", "per instance: " + " / ".join(sorted(s.methods)), s.seconds)


def discover_fusions(timeout_ms: int = 2000, progress: Callable[[str], Any] | None = None
                     ) -> tuple[list[dict], list[dict], dict[str, dict[str, int]]]:
    """(admitted fusion entries, rejected entries, counts per pair)."""
    admitted: list[dict] = []
    rejected: list[dict] = []
    counts: dict[str, dict[str, int]] = {}
    covered: dict[str, set[tuple]] = {}
    by_pair: dict[str, list[Schema]] = {}
    for s in schemas():
        by_pair.setdefault(f"{s.pair[0].op}+{s.pair[1].op}", []).append(prove_schema(s, timeout_ms))
        if progress:
            progress(s.name)
    for pair, proved in by_pair.items():  # the schema proven for the most instances first: the others may be subsumed
        for s in sorted(proved, key=lambda s: -len(s.proven)):
            _admit(s, pair, counts, covered, admitted, rejected)
    return admitted, rejected, counts


def _admit(s: Schema, pair: str, counts: dict, covered: dict, admitted: list, rejected: list) -> None:
    """Admit a proven schema unless earlier ones of its pair cover its instances; keep its first failure."""
    c = counts.setdefault(pair, {"proposals": 0, "admitted": 0, "refuted": 0, "illegal": 0, "unknown": 0,
                                 "subsumed": 0, "instances_proved": 0})
    c["proposals"] += 1
    c["instances_proved"] += len(s.proven)
    if s.proven and not set(s.proven) <= covered.get(pair, set()):
        covered.setdefault(pair, set()).update(s.proven)
        admitted.append(fusion_entry(s))
        c["admitted"] += 1
    elif s.proven:
        c["subsumed"] += 1
        rejected.append({"kind": "fusion", "name": s.name, "status": "subsumed", "method": "instances",
                         "detail": f"its {len(s.proven)} proven instances are covered by another rule of {pair}"})
    if s.failure is not None:
        inst, r = s.failure
        if not s.proven:
            c[r.status] += 1
        where = ", ".join(f"{k}={v}" for k, v in inst.items()) or "no variables"
        rejected.append(rejected_entry("fusion", f"{s.name} @ {where}", r))


# -- applying admitted rules ---------------------------------------------------------------------
TILE_ARGS = ("src", "data", "data1", "data2", "stationary", "moving", "bias", "scale", "operand0", "operand1", "reduce_res")
IMMEDIATE_OK = ("scale", "operand0", "operand1")  # arguments that take a tile or a compile-time number


def _match(pattern: Instr, ins: Instr, binding: dict[str, Any]) -> bool:
    if pattern.op != ins.op or dict(pattern.args).keys() != dict(ins.args).keys():
        return False
    pairs = [("dst", pattern.dst, ins.dst), *((k, v, ins.arg(k)) for k, v in pattern.args)]
    for key, want, got in pairs:
        if key in IMMEDIATE_OK and isinstance(want, str) and is_immediate(got):
            # a rule proved for any [P, 1] tile holds for a constant one: a compile-time number
            if binding.setdefault(("tile", want), got) != got:
                return False
        elif key in ("dst", *TILE_ARGS) and isinstance(want, str):
            if not isinstance(got, str) or binding.setdefault(("tile", want), got) != got:
                return False
        elif key == "op" and pattern.op == "activation" and want == ANY_FUNCTION:  # proved for any function
            if got == ANY_FUNCTION or binding.setdefault(("fn", want), got) != got:
                return False
        elif key in TILE_ARGS and isinstance(want, tuple) and want[:1] == ("scalar",):
            if not is_immediate(got):  # proved for a symbolic scalar: any compile-time number
                return False
            if binding.setdefault(("scalar", want[1]), got) != got:
                return False
        elif want != got:
            return False
    return True


def _rename(v: Any, binding: Mapping[Any, Any]) -> Any:
    if isinstance(v, str):
        return binding.get(("tile", v), v)
    if isinstance(v, tuple) and v[:1] == ("scalar",) and ("scalar", v[1]) in binding:
        return binding[("scalar", v[1])]
    if isinstance(v, tuple):
        return tuple(_rename(x, binding) for x in v)
    return v


def fuse(sequence: Sequence[Instr], rules: Sequence[Mapping[str, Any]], features: set[str],
         keep: Sequence[str] = ("out",)) -> tuple[Instr, ...]:
    """Apply admitted fusion rules to adjacent instructions (the second reads the first's tile) until
    none applies; a rule needing a feature the target lacks, or dropping a tile read later (or kept),
    does not apply."""
    seq = list(sequence)
    changed = True
    while changed:
        changed = False
        for i in range(len(seq) - 1):
            fused = _fuse_pair(seq[i], seq[i + 1], seq[i + 2:], rules, features, keep)
            if fused is not None:
                seq[i: i + 2] = [fused]
                changed = True
                break
    return tuple(seq)


def _fuse_pair(p: Instr, c: Instr, rest: Sequence[Instr], rules: Sequence[Mapping[str, Any]], features: set[str],
               keep: Sequence[str]) -> Instr | None:
    read_later = {v for ins in rest for k, v in ins.args if k in TILE_ARGS and isinstance(v, str)} | set(keep)
    for rule in rules:
        if not set(rule["conditions"]["features"]) <= features:
            continue
        if rule["conditions"]["dead"] and p.dst in read_later:
            continue
        for pattern, (fused,) in _instances_of(rule):
            binding: dict[Any, Any] = {}
            if _match(pattern[0], p, binding) and _match(pattern[1], c, binding):
                args = {k: (_rename(v, binding) if k in TILE_ARGS else v) for k, v in fused.args}
                if fused.op == "activation" and args["op"] == ANY_FUNCTION:
                    args["op"] = binding[("fn", ANY_FUNCTION)]
                if any(is_immediate(v) for k, v in args.items() if k in TILE_ARGS and k not in IMMEDIATE_OK):
                    continue  # a number bound where the fused instruction needs a tile (an activation's bias)
                return Instr.of(fused.op, _rename(fused.dst, binding), space=fused.space, **args)
    return None


_INSTANCES: dict[str, list[tuple[tuple[Instr, ...], tuple[Instr, ...]]]] = {}


def _instances_of(rule: Mapping[str, Any]) -> list[tuple[tuple[Instr, ...], tuple[Instr, ...]]]:
    """The rule's (pair, fused) instructions per proved instance, built once per rule version."""
    key = rule["digest"]
    if key not in _INSTANCES:
        _INSTANCES[key] = [(instantiate(rule["pair"], inst), instantiate(rule["fused"], inst)) for inst in instances(rule)]
    return _INSTANCES[key]
