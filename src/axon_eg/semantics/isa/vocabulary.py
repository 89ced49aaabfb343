"""The instruction vocabulary's meaning: one handler per NKI instruction, registered into ``INSTRUCTIONS``.

Names and arguments follow ``axon_eg.backends.nki.isa`` (the NKI API): ``nc_transpose(dst, data,
engine)``, ``tensor_reduce(dst, op, data, axis, negate, keepdims)``, ``activation(dst, op, data, bias,
scale, reduce_op, reduce_res, reduce_cmd)``; ``engine`` picks the engine of the instructions that may
run on several. Two differences, both about what a proof can state: ``nc_matmul``'s ``accumulate``
is a bool (False: overwrite, True: add to what the PSUM tile holds, which must have been written), and
``memset``/``iota`` take the destination's ``shape`` (an allocation, not an instruction attribute).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import nf
from ..nf import ONE, ZERO, Ix, Poly
from .instructions import (
    ACTIVATION_REDUCE_OPS,
    ACTIVATIONS,
    ANY_FUNCTION,
    CONTRACTION_MAX,
    MOVING_FREE_MAX,
    ON_CHIP,
    REDUCE_OPS,
    STATIONARY_FREE_MAX,
    TRANSPOSE_MAX,
    IllFormed,
    Index,
    Instr,
    InstrDef,
    Machine,
    TileType,
    Value,
    immediate,
    is_immediate,
    parse_dim,
    register,
)


def _shape_arg(ins: Instr) -> tuple[Ix, ...]:
    shape = ins.arg("shape")
    if not isinstance(shape, tuple) or not shape:
        raise IllFormed(f"{ins.op}: shape must be a list of dims", illegal=True)
    return tuple(parse_dim(d) for d in shape)


def _copy(src: tuple[str, ...], dst: tuple[str, ...]) -> Callable[[Machine, Instr], None]:
    def handler(m: Machine, ins: Instr) -> None:
        t, fn = m.read(ins, "src", src)
        out = m.write(ins, ins.dst, t.shape, fn, dst)
        if m.engine != "dma":
            m.free_limit(t)
            m.free_limit(out)

    return handler


def _transposed(ins: Instr, t: TileType) -> tuple[Ix, Ix]:
    if len(t.shape) != 2:
        raise IllFormed(f"{ins.op}: transposes 2-D tiles only", illegal=True)
    return t.shape[1], t.shape[0]


def _dma_transpose(m: Machine, ins: Instr) -> None:
    t, fn = m.read(ins, "src", ("hbm", "sbuf"))
    m.write(ins, ins.dst, _transposed(ins, t), lambda idx: fn((idx[1], idx[0])), ("sbuf",))
    m.features.add("dma_transpose")
    m.dtype_bytes.add((str(ins.arg("src")), 2))  # hw-facts: 2-byte dtypes only


def _nc_transpose(m: Machine, ins: Instr) -> None:
    t, fn = m.read(ins, "data", ON_CHIP)
    shape = _transposed(ins, t)
    for d in shape:
        m.limit(d, TRANSPOSE_MAX[m.engine])
    m.write(ins, ins.dst, shape, lambda idx: fn((idx[1], idx[0])), ON_CHIP)


def _nc_matmul(m: Machine, ins: Instr) -> None:
    st, s = m.read(ins, "stationary", ("sbuf",))
    mt, mv = m.read(ins, "moving", ("sbuf",))
    if len(st.shape) != 2 or len(mt.shape) != 2:
        raise IllFormed("nc_matmul: stationary and moving must be 2-D", illegal=True)
    m.same(st.partition, mt.partition, "nc_matmul: contraction (partition) dims of stationary and moving")
    k_len, rows, cols = st.shape[0], st.shape[1], mt.shape[1]
    m.limit(k_len, CONTRACTION_MAX)
    m.limit(rows, STATIONARY_FREE_MAX)
    m.limit(cols, MOVING_FREE_MAX)
    previous: Value | None = None
    if ins.arg("accumulate", False):
        if ins.dst not in m.types:
            raise IllFormed(f"nc_matmul: accumulates into {ins.dst!r} before it is written", illegal=True)
        pt = m.types[ins.dst]
        if pt.space != "psum":
            raise IllFormed("nc_matmul: accumulates only into psum", illegal=True)
        m.same(pt.shape[0], rows, "nc_matmul: accumulator rows")
        m.same(pt.shape[1], cols, "nc_matmul: accumulator columns")
        previous = m.function(ins.dst)

    def value(idx: Index) -> Poly:  # dst[m, n] (+)= SUM_k stationary[k, m] * moving[k, n]
        k = nf.fresh("k")
        total = nf.sum_over(k, k_len, s((Ix.of(k), idx[0])) * mv((Ix.of(k), idx[1])))
        return previous(idx) + total if previous is not None else total

    m.write(ins, ins.dst, (rows, cols), value, ("psum",))


def _activation(m: Machine, ins: Instr) -> None:
    op = ins.arg("op")
    if op == ANY_FUNCTION:
        f: Callable[[Poly], Poly] = lambda x: nf.fn(ANY_FUNCTION, x)  # noqa: E731
    elif op in ACTIVATIONS:
        f = ACTIVATIONS[op]
    else:
        raise IllFormed(f"activation: op {op!r} is not one of {sorted(ACTIVATIONS)}", illegal=True)
    t, data = m.read(ins, "data", ON_CHIP)
    m.free_limit(t)
    scale = m.per_partition(ins, "scale", t.partition) or (lambda idx: ONE)
    if is_immediate(ins.arg("bias")):
        raise IllFormed("activation: bias must be a [P, 1] tile", illegal=True)
    bias = m.per_partition(ins, "bias", t.partition) or (lambda idx: ZERO)
    m.free_limit(m.write(ins, ins.dst, t.shape, lambda idx: f(data(idx) * scale(idx) + bias(idx)), ON_CHIP))
    reduce_op, reduce_res, cmd = ins.arg("reduce_op"), ins.arg("reduce_res"), ins.arg("reduce_cmd", "idle")
    if (reduce_op is None) != (reduce_res is None):
        raise IllFormed("activation: reduce_op and reduce_res go together", illegal=True)
    if reduce_op is None:
        return
    if reduce_op not in ACTIVATION_REDUCE_OPS:
        raise IllFormed(f"activation: reduce_op must be add (the Scalar Engine reduce registers sum), got {reduce_op!r}",
                        illegal=True)
    if cmd != "reset_reduce":  # other commands read registers earlier instructions left: not this tile's sum
        raise IllFormed(f"activation: reduce_res needs reduce_cmd reset_reduce, got {cmd!r}", illegal=True)
    dst_fn, free = m.function(ins.dst), t.shape[1:]
    m.write(ins, str(reduce_res), (t.partition, Ix(1)), lambda idx: _sum_free(dst_fn, idx[0], free), ON_CHIP,
            space="sbuf")


def _sum_free(fn: Value, p: Ix, free: Sequence[Ix]) -> Poly:
    names = [nf.fresh("r") for _ in free]
    total = fn((p, *(Ix.of(n) for n in names)))
    for n, length in reversed(list(zip(names, free))):
        total = nf.sum_over(n, length, total)
    return total


def _tensor_tensor(m: Machine, ins: Instr) -> None:
    t1, a = m.read(ins, "data1", ON_CHIP)
    t2, b = m.read(ins, "data2", ON_CHIP)
    if t1.space == t2.space == "psum":
        raise IllFormed("tensor_tensor: data1 and data2 are both in psum; at most one may be", illegal=True)
    if len(t1.shape) != len(t2.shape):
        raise IllFormed(f"tensor_tensor: ranks differ ({len(t1.shape)} vs {len(t2.shape)})", {})
    for x, y in zip(t1.shape, t2.shape):
        m.same(x, y, "tensor_tensor: operand shapes")
    op = m.alu(ins, "op")
    m.free_limit(t1)
    m.free_limit(t2)
    m.free_limit(m.write(ins, ins.dst, t1.shape, lambda idx: op(a(idx), b(idx)), ON_CHIP))


def _tensor_scalar(m: Machine, ins: Instr) -> None:
    t, data = m.read(ins, "data", ON_CHIP)
    m.free_limit(t)
    steps = []
    for i in (0, 1):
        if ins.arg(f"op{i}") is None:
            if i == 0 or ins.arg(f"operand{i}") is not None:
                raise IllFormed(f"tensor_scalar: op{i} and operand{i} go together", illegal=True)
            continue
        operand = m.per_partition(ins, f"operand{i}", t.partition)
        if operand is None:
            raise IllFormed(f"tensor_scalar: op{i} and operand{i} go together", illegal=True)
        steps.append((m.alu(ins, f"op{i}"), operand, bool(ins.arg(f"reverse{i}", False))))

    def value(idx: Index) -> Poly:  # (data op0 operand0) op1 operand1; reverse swaps an op's operands
        v = data(idx)
        for op, operand, reverse in steps:
            v = op(operand(idx), v) if reverse else op(v, operand(idx))
        return v

    m.free_limit(m.write(ins, ins.dst, t.shape, value, ON_CHIP))


def _tensor_reduce(m: Machine, ins: Instr) -> None:
    t, data = m.read(ins, "data", ON_CHIP)
    op = ins.arg("op")
    if op not in REDUCE_OPS:
        raise IllFormed(f"tensor_reduce: op {op!r} is not one of {sorted(REDUCE_OPS)}", illegal=True)
    axis = ins.arg("axis")
    axes = tuple(sorted(axis)) if isinstance(axis, tuple) else (axis,)
    rank = len(t.shape)
    if not axes or any(not isinstance(a, int) for a in axes) or axes != tuple(range(axes[0], rank)) or axes[0] < 1:
        raise IllFormed(f"tensor_reduce: axis {axis!r} must be the trailing free axes of a rank-{rank} tile", illegal=True)
    keep, sign = bool(ins.arg("keepdims", False)), -1 if ins.arg("negate", False) else 1
    shape = tuple(Ix(1) if a in axes else d for a, d in enumerate(t.shape) if keep or a not in axes)
    m.free_limit(t)

    def value(idx: Index) -> Poly:
        in_idx, binders = list(idx[: axes[0]]), []
        for a in axes:
            v = nf.fresh("r")
            binders.append((v, t.shape[a]))
            in_idx.append(Ix.of(v))
        body = data(tuple(in_idx))
        if op != "add":
            return nf.reduce_max(REDUCE_OPS[op], tuple(binders), body).scale(sign)
        for v, d in reversed(binders):
            body = nf.sum_over(v, d, body)
        return body.scale(sign)

    m.write(ins, ins.dst, shape, value, ON_CHIP)


def _memset(m: Machine, ins: Instr) -> None:
    v = ins.arg("value")
    if not is_immediate(v):
        raise IllFormed("memset: value must be an immediate", illegal=True)
    c = immediate(v, m.scalars)
    m.write(ins, ins.dst, _shape_arg(ins), lambda idx: c, ON_CHIP)


def _iota(m: Machine, ins: Instr) -> None:
    shape = _shape_arg(ins)
    if len(shape) != 2:
        raise IllFormed("iota: 2-D tiles only (pattern [[1, F]])", illegal=True)
    offset, mult = int(ins.arg("offset", 0)), int(ins.arg("channel_multiplier", 0))
    m.write(ins, ins.dst, shape, lambda idx: Poly.atom(("dim", idx[0].scale(mult) + idx[1] + offset)), ("sbuf",))


DMA, TENSOR, VECTOR, SCALAR, GPSIMD = ("dma",), ("tensor",), ("vector",), ("scalar",), ("gpsimd",)
for d in (
    InstrDef("load", DMA, ("src",), (), _copy(("hbm",), ("sbuf",))),
    InstrDef("store", DMA, ("src",), (), _copy(("sbuf",), ("hbm",))),
    InstrDef("dma_copy", DMA, ("src",), (), _copy(("hbm", "sbuf"), ("sbuf", "hbm"))),
    InstrDef("dma_transpose", DMA, ("src",), (), _dma_transpose),
    InstrDef("nc_matmul", TENSOR, ("stationary", "moving"), ("accumulate",), _nc_matmul),
    InstrDef("nc_transpose", ("tensor", "vector"), ("data", "engine"), (), _nc_transpose),
    InstrDef("activation", SCALAR, ("op", "data"), ("bias", "scale", "reduce_op", "reduce_res", "reduce_cmd"), _activation),
    InstrDef("tensor_tensor", ("vector", "gpsimd"), ("data1", "data2", "op"), ("engine",), _tensor_tensor),
    InstrDef("tensor_scalar", ("vector", "scalar", "gpsimd"), ("data", "op0", "operand0"),
             ("reverse0", "op1", "operand1", "reverse1", "engine"), _tensor_scalar),
    InstrDef("tensor_reduce", VECTOR, ("op", "data", "axis"), ("negate", "keepdims"), _tensor_reduce),
    InstrDef("tensor_copy", ("vector", "scalar", "gpsimd"), ("src",), ("engine",), _copy(ON_CHIP, ON_CHIP)),
    InstrDef("memset", ("vector", "gpsimd"), ("shape", "value"), ("engine",), _memset),
    InstrDef("iota", GPSIMD, ("shape",), ("offset", "channel_multiplier"), _iota),
):
    register(d)


def default_space(ins: Instr) -> str:
    """The memory an instruction writes when its destination's is not given."""
    if ins.space is not None:
        return ins.space
    if ins.op in ("nc_matmul", "store") or (ins.op == "nc_transpose" and ins.arg("engine") == "tensor"):
        return "psum" if ins.op != "store" else "hbm"
    return "sbuf"


def engine(ins: Instr) -> str:
    from .instructions import INSTRUCTIONS

    return INSTRUCTIONS[ins.op].engine_of(ins)
