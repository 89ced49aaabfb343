"""NKI lowering synthesis: every tile op has a proven lowering on trn1 and trn2, every stored lowering
and fusion re-proves, planted wrong sketches and fusions are refused with counterexamples that
replay, the loader refuses edited entries, discovery regenerates the store, and every admitted
sequence (fused or not) computes the tile op's reference in an independent NumPy evaluator."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.backends.nki import synthesis as S
from axon_eg.backends.nki import synthesis_store as store
from axon_eg.backends.nki.synthesis import TileOp, fuse, lower, tile_ops
from axon_eg.backends.nki.synthesis_space import tile_spec
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.semantics.isa import Instr, TileType, prove_lowering, prove_same
from axon_eg.semantics.nf import Ix

LOWERINGS, FUSIONS = store.load()
FUSION_NAMES = {e["name"] for e in FUSIONS}

# -------------------------------------------------------------------------------------------------
# An independent NumPy evaluator of instruction sequences (not the backend's simulator)
# -------------------------------------------------------------------------------------------------
_ERF = np.vectorize(math.erf)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


FUNCTIONS = {
    "copy": lambda x: x, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x, "tanh": np.tanh, "sigmoid": _sigmoid, "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0))),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    "relu": lambda x: np.where(x > 0, x, 0.0), "square": lambda x: x * x, "abs": np.abs, "erf": _ERF,
    "softplus": lambda x: np.log1p(np.exp(x)),
}
ALU = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
       "maximum": np.maximum, "minimum": np.minimum}
REDUCE = {"add": np.sum, "maximum": np.max, "minimum": np.min}


def run_numpy(sequence: tuple[Instr, ...], tiles: Mapping[str, np.ndarray], scalars: Mapping[str, float],
              dims: Mapping[str, int]) -> dict[str, np.ndarray]:
    env = {k: np.asarray(v, dtype=np.float64) for k, v in tiles.items()}

    def imm(e: Any) -> float:
        tag = e[0]
        if tag == "imm":
            return float(e[1])
        if tag == "scalar":
            return scalars[e[1]]
        if tag == "dim":
            return float(dims[e[1]]) if isinstance(e[1], str) else float(e[1])
        if tag == "neg":
            return -imm(e[1])
        if tag == "recip":
            return 1.0 / imm(e[1])
        return imm(e[1]) * imm(e[2])

    def operand(v: Any) -> Any:  # an immediate, or a [P, 1] tile broadcast along the free axis
        return imm(v) if isinstance(v, tuple) else env[v]

    for ins in sequence:
        a = dict(ins.args)
        if ins.op in ("load", "store", "dma_copy", "tensor_copy"):
            out = env[a["src"]].copy()
        elif ins.op == "dma_transpose":
            out = env[a["src"]].T.copy()
        elif ins.op == "nc_transpose":
            out = env[a["data"]].T.copy()
        elif ins.op == "nc_matmul":
            out = env[a["stationary"]].T @ env[a["moving"]]
            if a.get("accumulate"):
                out = env[ins.dst] + out
        elif ins.op == "activation":
            x = env[a["data"]] * (operand(a["scale"]) if "scale" in a else 1.0)
            x = x + (env[a["bias"]] if "bias" in a else 0.0)
            with np.errstate(all="ignore"):
                out = FUNCTIONS[a["op"]](x)
            if "reduce_op" in a:
                assert a["reduce_cmd"] == "reset_reduce"
                env[a["reduce_res"]] = REDUCE[a["reduce_op"]](out, axis=1, keepdims=True)
        elif ins.op == "tensor_tensor":
            out = ALU[a["op"]](env[a["data1"]], env[a["data2"]])
        elif ins.op == "tensor_scalar":
            out = env[a["data"]]
            for i in ("0", "1"):
                if "op" + i in a:
                    u = operand(a["operand" + i])
                    out = ALU[a["op" + i]](u, out) if a.get("reverse" + i) else ALU[a["op" + i]](out, u)
        elif ins.op == "tensor_reduce":
            out = REDUCE[a["op"]](env[a["data"]], axis=a["axis"], keepdims=a.get("keepdims", False))
            out = -out if a.get("negate") else out
        elif ins.op == "memset":
            out = np.full(tuple(dims[d] if isinstance(d, str) else d for d in a["shape"]), imm(a["value"]))
        else:
            raise AssertionError(f"the test evaluator has no {ins.op}")
        env[ins.dst] = np.asarray(out, dtype=np.float64)
    return env


def reference_and_sequence(op: TileOp, sequence: tuple[Instr, ...], dims: dict[str, int], seed: int):
    spec = tile_spec(op)
    program = spec.program.bind({k: v for k, v in dims.items() if k in spec.program.free_dims})
    inputs = random_inputs(program, seed=seed)
    ref = np.asarray(interpret(program, inputs))
    scalars = {s.name: float(inputs[s.name]) for s in spec.symbols}  # symbolic scalars are rank-0 inputs
    got = run_numpy(sequence, inputs, scalars, dims)["out"]
    return ref, got


# -------------------------------------------------------------------------------------------------
# The store: coverage, re-proof, regeneration
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_every_tile_op_has_an_admitted_lowering(target: str) -> None:
    for op in tile_ops():
        found = lower(op, target)
        assert found, f"{op.key}: no admitted lowering on {target}"
        assert all(lw.proof["status"] == "proven" for lw in found)
        uses_dma_transpose = any(i.op == "dma_transpose" for lw in found for i in lw.sequence)
        if target == "trn1":
            assert not uses_dma_transpose, f"{op.key}: dma_transpose offered on trn1"
    assert any(i.op == "dma_transpose" for lw in lower(TileOp("transpose", ("tile",), (), "hbm"), "trn2")
               for i in lw.sequence)


def test_lower_is_cheapest_first_and_respects_limits() -> None:
    exp = lower(TileOp("exp", ("tile",)), "trn2")
    assert str(exp[0]) == "out = activation(data=x, op=exp)"
    mean = lower(TileOp("mean", ("tile",)), "trn2")
    assert len(mean[0].sequence) == 1 and mean[0].sequence[0].arg("reduce_op") == "add"  # one activation
    costs = [(lw.cost["instructions"], len(lw.cost["engines"])) for lw in mean]
    assert costs == sorted(costs)
    mm = TileOp("matmul", ("tile", "tile"), (("a_layout", "mk"),), "sbuf")
    assert lower(mm, "trn2") == lower(mm, "trn2")  # deterministic
    assert lower(mm, "trn2", sizes={"M": 128, "K": 128, "N": 1024}) == []  # moving free dim > 512
    small = lower(mm, "trn2", sizes={"M": 16, "K": 16, "N": 16})
    assert any(i.op == "nc_transpose" and i.arg("engine") == "vector" for lw in small for i in lw.sequence)
    big = lower(mm, "trn2", sizes={"M": 128, "K": 128, "N": 512})
    assert big and not any(i.arg("engine") == "vector" and i.op == "nc_transpose" for lw in big for i in lw.sequence)
    hbm = TileOp("matmul", ("tile", "tile"), (("a_layout", "mk"),), "hbm")
    with_dma = lower(hbm, "trn2")
    assert any(i.op == "dma_transpose" for i in with_dma[0].sequence)
    assert not any(i.op == "dma_transpose" for lw in lower(hbm, "trn2", dtypes={"A": 4}) for i in lw.sequence)


def test_every_stored_lowering_and_fusion_reproves() -> None:
    failures, n, _ = S.verify()
    assert not failures, failures[:3]
    assert n == len(LOWERINGS) + len(FUSIONS)


@pytest.mark.slow
def test_discovery_regenerates_the_store(tmp_path: Path) -> None:
    summary = S.discover(jobs=2, directory=tmp_path)
    fresh = json.loads((tmp_path / "lowerings.json").read_text())
    assert {e["name"] for e in fresh["entries"]} == {e["name"] for e in LOWERINGS}
    assert {e["name"] for e in json.loads((tmp_path / "fusions.json").read_text())["entries"]} == FUSION_NAMES
    assert fresh["sketches"] == store.summary()["lowerings"]
    assert summary.totals()["proven"] > len(LOWERINGS) and summary.totals()["refuted"] > 1000


# -------------------------------------------------------------------------------------------------
# Planted wrong sketches: refused, with a counterexample that replays
# -------------------------------------------------------------------------------------------------
def _refuted(op: TileOp, sequence: tuple[Instr, ...]):
    spec = tile_spec(op)
    r, _ = prove_lowering(spec.program, spec.inputs, sequence, symbols=spec.symbols)
    assert r.status == "refuted" and r.counterexample is not None, r
    return r.counterexample


def test_stationary_moving_swapped_without_transpose_is_refused() -> None:
    op = TileOp("matmul", ("tile", "tile"), (("a_layout", "km"),), "sbuf")  # A given as A.T [K, M]
    swapped = (Instr.of("nc_matmul", "acc", stationary="B", moving="A", accumulate=False),
               Instr.of("tensor_copy", "out", src="acc"))
    cex = _refuted(op, swapped)
    ref, got = reference_and_sequence(op, swapped, {"K": 3, **cex.dims}, 0)
    assert ref.shape != got.shape  # [M, N] vs [N, M] at the counterexample's sizes
    right = (Instr.of("nc_matmul", "acc", stationary="A", moving="B", accumulate=False),
             Instr.of("tensor_copy", "out", src="acc"))
    spec = tile_spec(op)
    assert prove_lowering(spec.program, spec.inputs, right, symbols=spec.symbols)[0].proven


def test_reverse_flag_flipped_for_subtract_is_refused() -> None:
    op = TileOp("sub", ("tile", "row"))
    flipped = (Instr.of("tensor_scalar", "out", data="x", op0="subtract", operand0="y", reverse0=True),)
    cex = _refuted(op, flipped)
    ref, got = reference_and_sequence(op, flipped, cex.dims, cex.seed)
    assert not np.allclose(ref, got)
    assert str(lower(op, "trn2")[0]) == "out = tensor_scalar(data=x, op0=subtract, operand0=y, reverse0=False)"


def test_activation_scale_applied_after_the_function_is_refused() -> None:
    op = TileOp("exp_affine", ("tile", "scalar", "row"))  # exp(x * a + b)
    after = (Instr.of("activation", "t0", op="exp", data="x", bias="b"),
             Instr.of("tensor_scalar", "out", data="t0", op0="multiply", operand0=("scalar", "a")))
    cex = _refuted(op, after)
    ref, got = reference_and_sequence(op, after, cex.dims, cex.seed)
    assert not np.allclose(ref, got)
    assert str(lower(op, "trn2")[0]) == "out = activation(bias=b, data=x, op=exp, scale=a)"


def test_illegal_placements_are_refused_not_admitted() -> None:
    op = TileOp("transpose", ("tile",), (), "hbm")
    spec = tile_spec(op)
    r, _ = prove_lowering(spec.program, spec.inputs, (Instr.of("nc_transpose", "out", data="x", engine="tensor"),))
    assert r.status == "illegal" and "reads only" in r.detail  # TensorE cannot read HBM
    rejected = json.loads((store.DATA / "rejected.json").read_text())
    rows = rejected["lowerings"]["sub(tile,row)@sbuf"]
    assert any(r[0].startswith("tensor_scalar[op0=subtract,operand0=y,reverse0=True") and r[1] == "refuted" for r in rows)


# -------------------------------------------------------------------------------------------------
# Fusion rules
# -------------------------------------------------------------------------------------------------
REQUIRED_FUSIONS = [
    "dma_copy+nc_transpose -> y = dma_transpose(src=x)",
    "activation+tensor_reduce -> t = activation(bias=?b, data=x, op=?f, reduce_cmd=reset_reduce, reduce_op=?ro, "
    "reduce_res=y, scale=?k)",
    "tensor_scalar+tensor_scalar -> y = tensor_scalar(data=x, op0=?o1, op1=?o2, operand0=?u, operand1=w, "
    "reverse0=?r1, reverse1=?r2)",
    "tensor_scalar+activation -> y = activation(bias=?c, data=x, op=?g, scale=?u)",
]


@pytest.mark.parametrize("name", REQUIRED_FUSIONS)
def test_required_fusions_are_admitted(name: str) -> None:
    assert name in FUSION_NAMES
    entry = next(e for e in FUSIONS if e["name"] == name)
    assert entry["proof"]["status"] == "proven" and entry["proof"]["instances"] >= 1
    if name.startswith("dma_copy"):
        assert entry["conditions"]["features"] == ["dma_transpose"] and entry["conditions"]["dead"] == ["t"]
        assert entry not in S.fusion_rules("trn1") and entry in S.fusion_rules("trn2")
    if name.startswith("tensor_scalar+tensor_scalar"):
        assert entry["instances"] == "all"  # every op pair and reverse flags
    if name.startswith("tensor_scalar+activation"):  # only a multiply becomes the scale
        assert {row[list(entry["variables"]).index("?o1")] for row in entry["instances"]} == {"multiply"}


ROW, TILE = TileType((Ix.of("P"), Ix(1)), "sbuf"), TileType((Ix.of("P"), Ix.of("F")), "sbuf")


def test_planted_wrong_fusions_are_refused() -> None:
    inputs = {"x": TILE, "u": ROW, "w": ROW}
    pair = (Instr.of("tensor_scalar", "t", data="x", op0="subtract", operand0="u"),
            Instr.of("tensor_scalar", "y", data="t", op0="divide", operand0="w"))
    swapped = Instr.of("tensor_scalar", "y", data="x", op0="divide", operand0="w", op1="subtract", operand1="u")
    r = prove_same(inputs, pair, (swapped,), ["y"])
    assert r.status == "refuted" and r.counterexample is not None
    right = Instr.of("tensor_scalar", "y", data="x", op0="subtract", operand0="u", op1="divide", operand1="w")
    assert prove_same(inputs, pair, (right,), ["y"]).proven
    scale_after = (Instr.of("activation", "t", op="exp", data="x"),
                   Instr.of("tensor_scalar", "y", data="t", op0="multiply", operand0="u"))
    r = prove_same(inputs, scale_after, (Instr.of("activation", "y", op="exp", data="x", scale="u"),), ["y"])
    assert r.status == "refuted"
    max_reduce = (Instr.of("activation", "t", op="exp", data="x"),
                  Instr.of("tensor_reduce", "y", op="maximum", data="t", axis=1, keepdims=True))
    fused = Instr.of("activation", "t", op="exp", data="x", reduce_op="maximum", reduce_res="y", reduce_cmd="reset_reduce")
    r = prove_same(inputs, max_reduce, (fused,), ["y", "t"])
    assert r.status == "illegal" and "reduce_op must be add" in r.detail


def test_fuse_applies_admitted_rules() -> None:
    chain = (Instr.of("tensor_scalar", "t0", data="x", op0="multiply", operand0=("scalar", "a"), reverse0=False),
             Instr.of("tensor_scalar", "out", data="t0", op0="add", operand0="b", reverse0=False))
    (one,) = fuse(chain, "trn2")
    assert one == Instr.of("tensor_scalar", "out", data="x", op0="multiply", operand0=("scalar", "a"), reverse0=False,
                           op1="add", operand1="b", reverse1=False)
    transpose = (Instr.of("dma_copy", "t0", src="x"), Instr.of("nc_transpose", "t1", data="t0", engine="vector"),
                 Instr.of("tensor_copy", "out", src="t1"))
    # dma_copy + nc_transpose -> dma_transpose, then the PSUM evacuation copy is eliminated (dma_transpose + tensor_copy)
    assert fuse(transpose, "trn2") == (Instr.of("dma_transpose", "out", src="x"),)
    assert fuse(transpose, "trn1")[:2] == transpose[:2]  # no dma_transpose on trn1
    softmax_sum = (Instr.of("activation", "t0", op="exp", data="x", bias="m"),
                   Instr.of("tensor_reduce", "out", op="add", data="t0", axis=1, keepdims=True))
    assert fuse(softmax_sum, "trn2") == (Instr.of("activation", "t0", op="exp", data="x", bias="m", reduce_op="add",
                                                  reduce_res="out", reduce_cmd="reset_reduce"),)
    reused = (*chain[:1], chain[1], Instr.of("tensor_tensor", "z", data1="t0", data2="out", op="add"))
    assert fuse(reused, "trn2", keep=("z",)) == reused  # t0 is read later: not dead, not fused


# -------------------------------------------------------------------------------------------------
# The loader refuses hand edits
# -------------------------------------------------------------------------------------------------
def _copy_store(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    shutil.copytree(store.DATA, d)
    return d


def _edit(path: Path, key: str, change) -> None:
    body = json.loads(path.read_text())
    change(body[key][0])
    path.write_text(json.dumps(body))


def test_loader_refuses_a_hand_edited_lowering(tmp_path: Path) -> None:
    d = _copy_store(tmp_path)
    store.load(d)  # the copy loads
    _edit(d / "lowerings.json", "entries", lambda e: e["sequence"][0]["args"].update(op="log"))
    with pytest.raises(store.LoweringStoreError, match="digest"):
        store.load(d)


def test_loader_refuses_consistent_edits_and_stale_proofs(tmp_path: Path) -> None:
    d = _copy_store(tmp_path)

    def widen(e: dict) -> None:  # drop a limit and re-digest: the sequence says otherwise
        e["conditions"]["limits"] = e["conditions"]["limits"][1:]
        e["digest"] = store.digest(e)

    _edit(d / "lowerings.json", "entries", widen)
    with pytest.raises(store.LoweringStoreError, match="do not follow"):
        store.load(d)
    d = _copy_store(tmp_path / "stale")

    def stale(e: dict) -> None:
        e["proof"]["semantics"] = "0" * 64
        e["digest"] = store.digest(e)

    _edit(d / "fusions.json", "entries", stale)
    with pytest.raises(store.LoweringStoreError, match="other semantics"):
        store.load(d)


# -------------------------------------------------------------------------------------------------
# Every admitted sequence (and its fused form) computes the tile op on random concrete shapes
# -------------------------------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(p=st.integers(1, 5), f=st.integers(1, 6), m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_admitted_sequences_compute_the_tile_op_in_numpy(p: int, f: int, m: int, k: int, n: int, seed: int) -> None:
    dims = {"P": p, "F": f, "M": m, "K": k, "N": n}
    for entry in LOWERINGS:
        op = TileOp.from_json(entry["tile_op"])
        sequence = store.sequence_of(entry)
        for seq in {sequence, fuse(sequence, "trn2")}:
            ref, got = reference_and_sequence(op, seq, dims, seed)
            assert ref.shape == got.shape, entry["name"]
            np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9, err_msg=f"{entry['name']} as {seq}")


def test_fuse_binds_constants_where_a_tile_was_proved() -> None:
    chain = (Instr.of("tensor_scalar", "t0", data="x", op0="multiply", operand0=("scalar", "a"), reverse0=False),
             Instr.of("tensor_scalar", "out", data="t0", op0="add", operand0=("scalar", "b"), reverse0=False))
    (one,) = fuse(chain, "trn2")  # the rule was proved for any [P, 1] tile w: a constant is one
    assert one.arg("operand1") == ("scalar", "b")
    to_bias = (Instr.of("tensor_scalar", "t0", data="x", op0="add", operand0=("scalar", "a"), reverse0=False),
               Instr.of("activation", "out", op="exp", data="t0"))
    assert fuse(to_bias, "trn2") == to_bias  # a number cannot become an activation's bias tile


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_fused_lowerings_still_prove(target: str) -> None:
    fused_any = 0
    for entry in LOWERINGS:
        op = TileOp.from_json(entry["tile_op"])
        sequence = store.sequence_of(entry)
        fused = fuse(sequence, target)
        if fused == sequence:
            continue
        fused_any += 1
        spec = tile_spec(op)
        r, machine = prove_lowering(spec.program, spec.inputs, fused, symbols=spec.symbols)
        assert r.proven, (entry["name"], fused, r)
        assert target == "trn2" or "dma_transpose" not in machine.features
    assert fused_any > 10
