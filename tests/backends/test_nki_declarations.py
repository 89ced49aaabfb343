"""One declaration per NKI instruction (``semantics/isa/declarations.py``) ties its readers: the simulator
(``backends/nki/isa.py`` + ``isa_numpy.py``, and the ``nki.isa`` / ``nki.language`` functions of both
dialects), the Z3 semantics (``Machine`` and its ``MEANINGS``) and the latency models the trace and the
Trainium cost model use. Every declared instruction has an implementation in each reader and nothing
else does; the vocabularies agree; and on one small well-formed instance per instruction, the simulator
and the Machine accept every declared attribute value, engine and operand memory and both refuse the
undeclared ones."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from axon_eg.backends.nki import api as nki_api
from axon_eg.backends.nki import isa, isa_numpy
from axon_eg.backends.nki import latency as L
from axon_eg.backends.nki.nki_checks import BFLOAT16
from axon_eg.backends.nki.nki_isa_namespaces import Isa, IsaCommon, LegacyIsa
from axon_eg.backends.nki.nki_namespaces import Language, members
from axon_eg.backends.nki.session import Session
from axon_eg.hw import load
from axon_eg.semantics import isa as sem
from axon_eg.semantics.isa import declarations as D
from axon_eg.semantics.isa.declarations import DECLARATIONS, KERNEL, PROOF, Attr, Tile
from axon_eg.semantics.isa.instructions import MEANINGS, IllFormed, Instr, Machine, TileType, meaning, parse_dim

NAMES = list(DECLARATIONS)
F32 = np.dtype(np.float32)


def _session(target: str = "trn2", dialect: str = "current") -> Session:
    return Session(load(target), dialect, "<test>")


def test_every_declared_instruction_has_one_implementation_in_every_reader():
    assert NAMES == list(isa.INSTRUCTIONS)
    assert set(isa_numpy.IMPLEMENTATIONS) == set(DECLARATIONS) == set(MEANINGS)
    for name, d in DECLARATIONS.items():
        assert d.meaning is MEANINGS[name] and isa.get(name).declaration is d
    s = _session()
    common = set(members(IsaCommon(s)))
    nisa = {n for n, d in DECLARATIONS.items() if d.api.startswith("nisa.")}
    language = {n for n, d in DECLARATIONS.items() if d.api.startswith("nl.")}
    assert nisa | language == set(NAMES)
    legacy = {n for n in nisa if f"nki.isa.{n}" in nki_api.documented("legacy")}  # some are current-only
    assert nisa - legacy == {"tensor_scalar_cumulative", "rng"}
    # activation_reduce: activation's alias; set_rng_seed: the generator's state, no instruction of its own
    for namespace, names in ((members(Isa(s)), nisa | {"set_rng_seed"}),
                             (members(LegacyIsa(_session("trn1", "legacy"))), legacy)):
        assert set(namespace) - common == names | {"activation_reduce"}
    assert language <= set(members(Language(s)))
    with pytest.raises(ValueError, match="not a declared instruction"):
        meaning("nc_bogus")(lambda m, ins: None)
    with pytest.raises(IllFormed, match="unknown instruction"):
        Machine({}).run([Instr.of("nc_bogus", "y")])


def test_declarations_are_well_formed_and_their_keys_are_in_every_trainium_file():
    for name, d in DECLARATIONS.items():
        assert d.engines and set(d.engines) <= set(D.ENGINES) and set(d.latency) == set(d.engines), name
        assert "dst" in d.tiles and d.tiles["dst"].out, name
        for t in d.tiles.values():
            assert t.spaces and set(t.spaces) <= set(D.SPACES), (name, t.name)
            access = D.ENGINE_WRITES if t.out else D.ENGINE_READS
            assert all(set(t.spaces) & set(access[e]) for e in d.engines), (name, t.name)  # every engine reaches it
        for a in d.attrs.values():
            assert a.kind in D.KINDS and a.side in (D.BOTH, KERNEL, PROOF), (name, a.name)
            if a.kind == D.FLAG:
                assert a.values == D.FLAGS and a.default in (None, False), (name, a.name)
        for model in d.latency.values():
            assert model.kind in D.LATENCY_KEYS and set(model.operands) <= set(d.tiles), name
        assert set(d.dtype_bytes) <= set(d.tiles), name
    for target in ("trn1", "trn2"):
        spec = load(target)
        missing = [k for k in D.limit_keys() if spec.get(k) is None]
        assert not missing, (target, missing)


def test_the_readers_vocabularies_are_the_declared_ones():
    # the simulator implements every kernel value; the proofs give a meaning to the proven ones
    assert tuple(isa_numpy.ALU_OPS) == D.ALU_OPS and tuple(sem.ALU) == D.PROVEN_ALU_OPS
    assert tuple(isa_numpy.REDUCE_OPS) == D.REDUCE_OPS and tuple(sem.REDUCE_OPS) == D.PROVEN_REDUCE_OPS
    assert tuple(isa_numpy.ACTIVATIONS) == D.ACTIVATION_FUNCTIONS and tuple(sem.ACTIVATIONS) == D.PROVEN_ACTIVATION_FUNCTIONS
    assert set(D.PROVEN_ALU_OPS) < set(D.ALU_OPS) and set(D.PROVEN_ACTIVATION_FUNCTIONS) < set(D.ACTIVATION_FUNCTIONS)
    s = _session()
    tokens = members(Language(s))
    assert all(getattr(tokens[n], "nki_op", None) == n for n in (*D.ALU_OPS, *D.ACTIVATION_FUNCTIONS))
    common = IsaCommon(s)
    assert {n for n in D.REDUCE_CMDS if hasattr(common.reduce_cmd, n)} == set(D.REDUCE_CMDS)
    assert all(getattr(common.engine, e).name == e for e in D.ENGINES)


def test_the_simulator_takes_the_declared_parameters():
    """A kernel's call: the current-dialect nisa functions take every declared kernel-side parameter (and
    ``engine`` where several engines may run it); the simulator's attributes are the declared ones; the
    Machine takes every proof-side one and nothing else."""
    namespace = members(Isa(_session()))
    for name, d in DECLARATIONS.items():
        instr, kernel = isa.get(name), d.arguments(KERNEL)
        assert list(instr.attributes) == [p.name for p in kernel if isinstance(p, Attr) or p.scalar]
        assert set(instr.reads) | set(instr.writes) == {p.name for p in kernel if isinstance(p, Tile)}
        if name in namespace:  # (the legacy iota's index expression is the legacy call's)
            params = set(inspect.signature(namespace[name]).parameters)
            assert {p.name for p in kernel if not (isinstance(p, Attr) and p.kind == D.EXPR)} <= params, name
            assert ("engine" in params) == (len(d.engines) > 1 or name == "dma_copy"), name  # dma_copy: the queue
        required, optional = d.proof_arguments()
        assert set(required) | set(optional) == ({p.name for p in d.arguments(PROOF)} - {"dst"}
                                                  | ({"engine"} if len(d.engines) > 1 else set()))
        only_kernel = {p.name for p in d.params if p.side == KERNEL}
        for extra in only_kernel | {"bogus"}:
            assert _machine_refuses(name, {extra: 1}), (name, extra)


# -- one small well-formed instance per instruction, for the simulator and for the Machine ---------------
P, F = 4, 8
# instruction -> (tile operand -> (shape, memory, dtype)), proof arguments besides the tiles, kernel attributes
EXAMPLES: dict[str, tuple[dict[str, tuple[tuple[int, ...], str, Any]], dict[str, Any], dict[str, Any]]] = {
    "load": ({"src": ((P, F), "hbm", F32), "dst": ((P, F), "sbuf", F32)}, {}, {}),
    "store": ({"src": ((P, F), "sbuf", F32), "dst": ((P, F), "hbm", F32)}, {}, {}),
    "dma_copy": ({"src": ((P, F), "hbm", F32), "dst": ((P, F), "sbuf", F32)}, {}, {}),
    "dma_transpose": ({"src": ((P, F), "hbm", BFLOAT16), "dst": ((F, P), "sbuf", BFLOAT16)}, {}, {}),
    "nc_matmul": ({"stationary": ((P, P), "sbuf", BFLOAT16), "moving": ((P, F), "sbuf", BFLOAT16),
                   "dst": ((P, F), "psum", F32)}, {}, {}),
    "nc_transpose": ({"data": ((P, F), "sbuf", F32), "dst": ((F, P), "psum", F32)}, {"engine": "tensor"}, {}),
    "activation": ({"data": ((P, F), "sbuf", F32), "dst": ((P, F), "sbuf", F32)}, {"op": "exp"}, {"op": "exp"}),
    "tensor_tensor": ({"data1": ((P, F), "sbuf", F32), "data2": ((P, F), "sbuf", F32), "dst": ((P, F), "sbuf", F32)},
                      {"op": "add"}, {"op": "add"}),
    "tensor_scalar": ({"data": ((P, F), "sbuf", F32), "dst": ((P, F), "sbuf", F32)},
                      {"op0": "add", "operand0": ("imm", 1.0)}, {"op0": "add", "operand0": 1.0}),
    "tensor_reduce": ({"data": ((P, F), "sbuf", F32), "dst": ((P, 1), "sbuf", F32)},
                      {"op": "add", "axis": 1, "keepdims": True}, {"op": "add", "axis": 1, "keepdims": True}),
    "tensor_copy": ({"src": ((P, F), "sbuf", F32), "dst": ((P, F), "sbuf", F32)}, {}, {}),
    "memset": ({"dst": ((P, F), "sbuf", F32)}, {"shape": (P, F), "value": ("imm", 0.5)}, {"value": 0.5}),
    "iota": ({"dst": ((P, F), "sbuf", F32)}, {"shape": (P, F)}, {"pattern": ((1, F),)}),
    "reciprocal": ({"data": ((P, F), "sbuf", F32), "dst": ((P, F), "sbuf", F32)}, {}, {}),
    "scalar_tensor_tensor": ({"data": ((P, F), "sbuf", F32), "operand1": ((P, F), "sbuf", F32),
                              "dst": ((P, F), "sbuf", F32)},
                             {"op0": "multiply", "operand0": ("imm", 2.0), "op1": "add"},
                             {"op0": "multiply", "operand0": 2.0, "op1": "add"}),
    "tensor_scalar_reduce": ({"data": ((P, F), "sbuf", F32), "reduce_res": ((P, 1), "sbuf", F32),
                              "dst": ((P, F), "sbuf", F32)},
                             {"op0": "add", "operand0": ("imm", 1.0), "reduce_op": "add", "reduce_res": "r"},
                             {"op0": "add", "operand0": 1.0, "reduce_op": "add"}),
    "tensor_copy_predicated": ({"src": ((P, F), "sbuf", F32), "predicate": ((P, F), "sbuf", np.dtype(np.uint8)),
                                "dst": ((P, F), "sbuf", F32)}, {}, {}),
    "tensor_partition_reduce": ({"data": ((P, F), "sbuf", F32), "dst": ((1, F), "sbuf", F32)}, {"op": "add"},
                                {"op": "add"}),
    "bn_stats": ({"data": ((P, F), "sbuf", F32), "dst": ((P, 6), "sbuf", F32)}, {}, {}),
    "bn_aggr": ({"data": ((P, 6), "sbuf", F32), "dst": ((P, 2), "sbuf", F32)}, {}, {}),
    "max8": ({"src": ((P, F), "sbuf", F32), "dst": ((P, 8), "sbuf", F32)}, {}, {}),
    "nc_find_index8": ({"data": ((P, F), "sbuf", F32), "vals": ((P, 8), "sbuf", F32),
                        "dst": ((P, 8), "sbuf", np.dtype(np.uint32))}, {}, {}),
    "nc_match_replace8": ({"data": ((P, F), "sbuf", F32), "vals": ((P, 8), "sbuf", F32),
                           "dst": ((P, F), "sbuf", F32)}, {"imm": ("imm", 0.0)}, {"imm": 0.0}),
    "select_reduce": ({"predicate": ((P, F), "sbuf", np.dtype(np.uint8)), "on_true": ((P, F), "sbuf", F32),
                       "dst": ((P, F), "sbuf", F32)}, {"on_false": ("imm", -1.0)}, {"on_false": -1.0}),
    "range_select": ({"on_true_tile": ((P, F), "sbuf", F32), "bound0": ((P, 1), "sbuf", F32),
                      "bound1": ((P, 1), "sbuf", F32), "dst": ((P, F), "sbuf", F32)},
                     {"comp_op0": "greater_equal", "comp_op1": "less"}, {"comp_op0": "greater_equal", "comp_op1": "less"}),
    "dropout": ({"data": ((P, F), "sbuf", F32), "dst": ((P, F), "sbuf", F32)}, {"prob": ("imm", 0.5)}, {"prob": 0.5}),
    "rng": ({"dst": ((P, F), "sbuf", np.dtype(np.uint16))}, {}, {}),
    "tensor_tensor_scan": ({"data0": ((P, F), "sbuf", F32), "data1": ((P, F), "sbuf", F32),
                            "dst": ((P, F), "sbuf", F32)}, {"op0": "multiply", "op1": "add", "initial": ("imm", 0.0)},
                           {"op0": "multiply", "op1": "add", "initial": 0.0}),
    "tensor_scalar_cumulative": ({"src": ((P, F), "sbuf", F32), "dst": ((P, F), "sbuf", F32)},
                                 {"op0": "multiply", "op1": "add", "imm0": ("imm", 2.0)},
                                 {"op0": "multiply", "op1": "add", "imm0": 2.0, "imm1": 1.0}),
    "affine_select": ({"on_true_tile": ((P, F), "sbuf", F32), "dst": ((P, F), "sbuf", F32)},
                      {"on_false_value": ("imm", -1.0)},
                      {"pattern": ((-1, F),), "channel_multiplier": 1, "on_false_value": -1.0}),
}
KERNEL_ONLY = {n for n, d in DECLARATIONS.items() if not d.proven}  # proofs refuse them; the Machine tests skip them
# what some attribute values need besides: (proof arguments, kernel operands and attributes)
CONTEXT: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {
    ("activation", "reduce_op"): ({"reduce_res": "r", "reduce_cmd": "reset_reduce"},
                                  {"reduce_res": ((P, 1), "sbuf", F32), "reduce_cmd": "reset_reduce"}),
    ("tensor_scalar", "op1"): ({"operand1": ("imm", 2.0)}, {"operand1": 2.0}),
    ("nc_matmul", "accumulate"): ({}, {}),
}
WRITTEN_DST = {"nc_matmul", "tensor_copy_predicated"}  # they read what dst holds: write it first
SIM_REFUSALS = (isa.NkiLimitError, isa.NkiSimulationError, NotImplementedError)


def _machine_run(name: str, args: dict[str, Any], spaces: dict[str, str] | None = None) -> None:
    tiles, proof, _ = EXAMPLES[name]
    spaces = spaces or {}
    inputs, call = {}, {**proof}
    for key, (shape, space, _) in tiles.items():
        if DECLARATIONS[name].tiles[key].out:  # dst, and side outputs the proof arguments name (reduce_res)
            continue
        inputs[key] = TileType(tuple(parse_dim(d) for d in shape), spaces.get(key, space))
        call[key] = key
    if name in WRITTEN_DST:
        shape, space, _ = tiles["dst"]
        inputs["y"] = TileType(tuple(parse_dim(d) for d in shape), space)
    call.update(args)
    dst_space = spaces.get("dst")
    Machine(inputs, ["c"]).run([Instr.of(name, "y", space=dst_space, **call)])


def _machine_refuses(name: str, args: dict[str, Any], spaces: dict[str, str] | None = None) -> bool:
    try:
        _machine_run(name, args, spaces)
    except IllFormed as e:
        assert e.illegal, e
        return True
    return False


def _sim_run(name: str, attrs: dict[str, Any], engine: str | None = None, spaces: dict[str, str] | None = None,
             extra: dict[str, Any] | None = None) -> None:
    tiles, _, kernel = EXAMPLES[name]
    s, spaces, rng = _session(), spaces or {}, np.random.default_rng(0)
    operands: dict[str, Any] = {}
    attrs = {**kernel, **attrs}
    for key, value in {**tiles, **(extra or {})}.items():
        if not (isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], tuple)):
            attrs[key] = value  # a kernel attribute the context adds
            continue
        shape, space, dtype = value
        t = s.allocate(shape, dtype, spaces.get(key, space), name=key)
        if key != "dst" or name in WRITTEN_DST:
            t._buf.data[:] = rng.uniform(0.5, 1.5, t._buf.data.size).astype(dtype)
            t._buf.written[:] = True
        operands[key] = t
    for key in ("operand0", "operand1", "initial", "on_false", "prob"):
        if key in attrs:
            operands[key] = attrs.pop(key)
    if name in ("nc_find_index8", "nc_match_replace8"):  # the values to find: the first 8 of each partition
        vals, data = operands["vals"], operands["data"]
        vals._buf.data[:] = data._buf.data.reshape(P, -1)[:, :8].reshape(-1).astype(vals._buf.dtype)
    s.run(name, operands, attrs, engine)


def _sim_refuses(name: str, attrs: dict[str, Any], **kw: Any) -> bool:
    try:
        _sim_run(name, attrs, **kw)
    except SIM_REFUSALS:
        return True
    return False


def _finite_attributes() -> list[tuple[str, str]]:
    return [(n, a.name) for n, d in DECLARATIONS.items() for a in d.attrs.values() if a.values is not None]


@pytest.mark.parametrize("name", NAMES)
def test_each_example_runs_in_both(name):
    if name in KERNEL_ONLY:
        assert _machine_refuses(name, {})
    else:
        _machine_run(name, {})
    _sim_run(name, {})


@pytest.mark.parametrize("name,key", _finite_attributes())
def test_both_accept_the_declared_values_of_an_attribute_and_refuse_others(name, key):
    a = DECLARATIONS[name].attrs[key]
    proof_ctx, kernel_ctx = CONTEXT.get((name, key), ({}, {}))
    if name in KERNEL_ONLY:
        pass
    elif a.side in (D.BOTH, PROOF):
        for v in a.allowed(proof=True):
            assert not _machine_refuses(name, {**proof_ctx, key: v}), (name, key, v)
        for bad in ("bogus", 2):
            assert _machine_refuses(name, {**proof_ctx, key: bad}), (name, key, bad)
    else:
        assert _machine_refuses(name, {key: a.values[0]})  # a kernel-only parameter: proofs do not state it
    if a.side in (D.BOTH, KERNEL):
        for v in a.values:
            _sim_run(name, {key: v}, extra=kernel_ctx)
        for bad in ("bogus", 2):
            assert _sim_refuses(name, {key: bad}, extra=kernel_ctx), (name, key, bad)


@pytest.mark.parametrize("name", [n for n, d in DECLARATIONS.items() if len(d.engines) > 1])
def test_both_run_an_instruction_on_each_declared_engine_and_no_other(name):
    d = DECLARATIONS[name]
    for engine in D.ENGINES:
        declared = engine in d.engines
        assert name in KERNEL_ONLY or _machine_refuses(name, {"engine": engine}) != declared, (name, engine)
        assert _sim_refuses(name, {}, engine=engine) != declared, (name, engine)


@pytest.mark.parametrize("name", NAMES)
def test_both_take_an_operand_in_the_declared_memories_its_engine_reaches_and_no_other(name):
    d = DECLARATIONS[name]
    engine = EXAMPLES[name][1].get("engine", d.engines[0])
    for key, t in d.tiles.items():
        if key not in EXAMPLES[name][0] or t.scalar:
            continue
        access = D.ENGINE_WRITES if t.out else D.ENGINE_READS
        for space in D.SPACES:
            allowed = space in t.spaces and space in access[engine]
            machine = name in KERNEL_ONLY or (t.out and key != "dst")  # a side output's memory is the Machine's
            assert machine or _machine_refuses(name, {}, {key: space}) != allowed, (name, key, space)
            assert _sim_refuses(name, {}, engine=engine, spaces={key: space}) != allowed, (name, key, space)


def test_latency_models_price_the_trace_and_the_cost_model_alike():
    """isa.latency (the trace) is the declared model evaluated on the instruction's operands; the cost
    model's building blocks are the same formulas (one stream of N elements, a matmul of N columns, DMAs)."""
    spec = load("trn2")
    ops = {"stationary": isa.Operand((128, 128), BFLOAT16, "sbuf"), "moving": isa.Operand((128, 512), BFLOAT16, "sbuf"),
           "dst": isa.Operand((128, 512), F32, "psum")}
    rules = isa.check("nc_matmul", ops, {"accumulate": None}, spec, "tensor")
    assert isa.latency(rules) == L.engine_seconds(spec, "tensor", L.pe_cycles(spec, 512))
    copy = {"src": isa.Operand((128, 300), F32, "sbuf"), "dst": isa.Operand((128, 300), F32, "sbuf")}
    rules = isa.check("tensor_copy", copy, {}, spec, "scalar")
    assert isa.latency(rules) == L.engine_seconds(spec, "scalar", L.stream_cycles(spec, 1, 300))
    load_ = {"src": isa.Operand((128, 300), F32, "hbm"), "dst": isa.Operand((128, 300), F32, "sbuf")}
    assert isa.latency(isa.check("load", load_, {}, spec, "dma")) == L.dma_seconds(spec, 128 * 300 * 4)
    add = {"data1": copy["src"], "data2": copy["src"], "dst": copy["dst"]}
    assert isa.latency(isa.check("tensor_tensor", add, {"op": "add"}, spec, "vector")) == pytest.approx(
        2 * 300 * spec.value("costs.vector_cycles_per_element") / spec.value("compute.engines.vector.clock"))


def test_the_simulator_refuses_an_undeclared_attribute():
    with pytest.raises(isa.NkiSimulationError, match="unknown attribute 'bogus'"):
        _sim_run("tensor_copy", {"bogus": 1})
