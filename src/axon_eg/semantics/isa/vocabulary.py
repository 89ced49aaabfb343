"""The instructions' meaning: one handler per declared NKI instruction, registered into ``MEANINGS``.

What an instruction takes -- its arguments, engines, the memories of its operands, its attribute values
and the hardware-file keys of its limits -- is its declaration (:mod:`.declarations`, shared with the
simulator and the cost model); :meth:`Machine.read`, :meth:`Machine.write`, :meth:`Machine.attr` and
:meth:`Machine.bound` check against it, so a handler states only the value and the shape rules.
Two differences from a kernel's NKI call, both about what a proof can state: ``nc_matmul``'s
``accumulate`` is a bool (False: overwrite, True: add to what the PSUM tile holds, which must have been
written), and ``memset``/``iota`` take the destination's ``shape`` (an allocation, not an instruction
attribute); ``engine`` picks the engine of the instructions that may run on several.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import nf
from ..nf import ONE, ZERO, Ix, Poly
from .declarations import DECLARATIONS
from .instructions import (
    ACTIVATIONS,
    ANY_FUNCTION,
    REDUCE_OPS,
    IllFormed,
    Index,
    Instr,
    Machine,
    TileType,
    Value,
    immediate,
    is_immediate,
    meaning,
    parse_dim,
)


def _shape_arg(ins: Instr) -> tuple[Ix, ...]:
    shape = ins.arg("shape")
    if not isinstance(shape, tuple) or not shape:
        raise IllFormed(f"{ins.op}: shape must be a list of dims", illegal=True)
    return tuple(parse_dim(d) for d in shape)


@meaning("load", "store", "dma_copy", "tensor_copy")
def _copy(m: Machine, ins: Instr) -> None:
    t, fn = m.read(ins, "src")
    out = m.write(ins, ins.dst, t.shape, fn)
    if m.engine != "dma":
        m.free_limit(t)
        m.free_limit(out)


def _transposed(ins: Instr, t: TileType) -> tuple[Ix, Ix]:
    if len(t.shape) != 2:
        raise IllFormed(f"{ins.op}: transposes 2-D tiles only", illegal=True)
    return t.shape[1], t.shape[0]


@meaning("dma_transpose")
def _dma_transpose(m: Machine, ins: Instr) -> None:  # its feature and 2-byte dtype: declared, added by Machine.step
    t, fn = m.read(ins, "src")
    m.write(ins, ins.dst, _transposed(ins, t), lambda idx: fn((idx[1], idx[0])))


@meaning("nc_transpose")
def _nc_transpose(m: Machine, ins: Instr) -> None:
    t, fn = m.read(ins, "data")
    shape = _transposed(ins, t)
    for d in shape:
        m.bound(ins, d, m.engine)  # the transpose size of this engine
    m.write(ins, ins.dst, shape, lambda idx: fn((idx[1], idx[0])))


@meaning("nc_matmul")
def _nc_matmul(m: Machine, ins: Instr) -> None:
    st, s = m.read(ins, "stationary")
    mt, mv = m.read(ins, "moving")
    if len(st.shape) != 2 or len(mt.shape) != 2:
        raise IllFormed("nc_matmul: stationary and moving must be 2-D", illegal=True)
    m.same(st.partition, mt.partition, "nc_matmul: contraction (partition) dims of stationary and moving")
    k_len, rows, cols = st.shape[0], st.shape[1], mt.shape[1]
    m.bound(ins, k_len, "contraction")
    m.bound(ins, rows, "stationary_free")
    m.bound(ins, cols, "moving_free")
    previous: Value | None = None
    if m.attr(ins, "accumulate"):  # absent (None) or False: overwrite
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

    m.write(ins, ins.dst, (rows, cols), value)


@meaning("activation")
def _activation(m: Machine, ins: Instr) -> None:
    op = m.attr(ins, "op")
    f: Callable[[Poly], Poly] = (lambda x: nf.fn(ANY_FUNCTION, x)) if op == ANY_FUNCTION else ACTIVATIONS[op]
    t, data = m.read(ins, "data")
    m.free_limit(t)
    scale = m.per_partition(ins, "scale", t.partition) or (lambda idx: ONE)
    if is_immediate(ins.arg("bias")):
        raise IllFormed("activation: bias must be a [P, 1] tile", illegal=True)
    bias = m.per_partition(ins, "bias", t.partition) or (lambda idx: ZERO)
    m.free_limit(m.write(ins, ins.dst, t.shape, lambda idx: f(data(idx) * scale(idx) + bias(idx))))
    reduce_op, reduce_res = ins.arg("reduce_op"), ins.arg("reduce_res")
    if (reduce_op is None) != (reduce_res is None):
        raise IllFormed("activation: reduce_op and reduce_res go together", illegal=True)
    cmd = m.attr(ins, "reduce_cmd")
    if reduce_op is None:
        return
    m.attr(ins, "reduce_op")  # add: the Scalar Engine reduce registers sum
    if cmd != "reset_reduce":  # other commands read registers earlier instructions left: not this tile's sum
        raise IllFormed(f"activation: reduce_res needs reduce_cmd reset_reduce, got {cmd!r}", illegal=True)
    dst_fn, free = m.function(ins.dst), t.shape[1:]
    m.write(ins, str(reduce_res), (t.partition, Ix(1)), lambda idx: _sum_free(dst_fn, idx[0], free), "reduce_res")


def _sum_free(fn: Value, p: Ix, free: Sequence[Ix]) -> Poly:
    names = [nf.fresh("r") for _ in free]
    total = fn((p, *(Ix.of(n) for n in names)))
    for n, length in reversed(list(zip(names, free))):
        total = nf.sum_over(n, length, total)
    return total


def _same_shape(m: Machine, what: str, a: TileType, b: TileType) -> None:
    if len(a.shape) != len(b.shape):
        raise IllFormed(f"{what}: ranks differ ({len(a.shape)} vs {len(b.shape)})", {})
    for x, y in zip(a.shape, b.shape):
        m.same(x, y, what)


@meaning("tensor_tensor")
def _tensor_tensor(m: Machine, ins: Instr) -> None:
    t1, a = m.read(ins, "data1")
    t2, b = m.read(ins, "data2")
    if t1.space == t2.space == "psum":
        raise IllFormed("tensor_tensor: data1 and data2 are both in psum; at most one may be", illegal=True)
    _same_shape(m, "tensor_tensor: operand shapes", t1, t2)
    op = m.alu(ins, "op")
    m.free_limit(t1)
    m.free_limit(t2)
    m.free_limit(m.write(ins, ins.dst, t1.shape, lambda idx: op(a(idx), b(idx))))


@meaning("tensor_scalar")
def _tensor_scalar(m: Machine, ins: Instr) -> None:
    t, data = m.read(ins, "data")
    m.free_limit(t)
    steps = []
    for i in (0, 1):
        reverse = bool(m.attr(ins, f"reverse{i}"))
        if ins.arg(f"op{i}") is None:
            if i == 0 or ins.arg(f"operand{i}") is not None:
                raise IllFormed(f"tensor_scalar: op{i} and operand{i} go together", illegal=True)
            continue
        operand = m.per_partition(ins, f"operand{i}", t.partition)
        if operand is None:
            raise IllFormed(f"tensor_scalar: op{i} and operand{i} go together", illegal=True)
        steps.append((m.alu(ins, f"op{i}"), operand, reverse))

    def value(idx: Index) -> Poly:  # (data op0 operand0) op1 operand1; reverse swaps an op's operands
        v = data(idx)
        for op, operand, reverse in steps:
            v = op(operand(idx), v) if reverse else op(v, operand(idx))
        return v

    m.free_limit(m.write(ins, ins.dst, t.shape, value))


@meaning("tensor_reduce")
def _tensor_reduce(m: Machine, ins: Instr) -> None:
    t, data = m.read(ins, "data")
    op = m.attr(ins, "op")
    axis = m.attr(ins, "axis")
    axes = tuple(sorted(axis)) if isinstance(axis, tuple) else (axis,)
    rank = len(t.shape)
    if not axes or any(not isinstance(a, int) for a in axes) or axes != tuple(range(axes[0], rank)) or axes[0] < 1:
        raise IllFormed(f"tensor_reduce: axis {axis!r} must be the trailing free axes of a rank-{rank} tile", illegal=True)
    keep, sign = bool(m.attr(ins, "keepdims")), -1 if m.attr(ins, "negate") else 1
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

    m.write(ins, ins.dst, shape, value)


@meaning("memset")
def _memset(m: Machine, ins: Instr) -> None:
    v = m.attr(ins, "value")
    if not is_immediate(v):
        raise IllFormed("memset: value must be an immediate", illegal=True)
    c = immediate(v, m.scalars)
    m.write(ins, ins.dst, _shape_arg(ins), lambda idx: c)


@meaning("iota")
def _iota(m: Machine, ins: Instr) -> None:
    shape = _shape_arg(ins)
    if len(shape) != 2:
        raise IllFormed("iota: 2-D tiles only (pattern [[1, F]])", illegal=True)
    offset, mult = int(m.attr(ins, "offset")), int(m.attr(ins, "channel_multiplier"))
    m.write(ins, ins.dst, shape, lambda idx: Poly.atom(("dim", idx[0].scale(mult) + idx[1] + offset)))


@meaning("reciprocal")
def _reciprocal(m: Machine, ins: Instr) -> None:
    t, data = m.read(ins, "data")
    m.free_limit(t)
    m.free_limit(m.write(ins, ins.dst, t.shape, lambda idx: nf.recip(data(idx))))


@meaning("scalar_tensor_tensor")
def _scalar_tensor_tensor(m: Machine, ins: Instr) -> None:
    t, data = m.read(ins, "data")
    t1, other = m.read(ins, "operand1")
    if t.space == t1.space == "psum":
        raise IllFormed("scalar_tensor_tensor: data and operand1 are both in psum; at most one may be", illegal=True)
    _same_shape(m, "scalar_tensor_tensor: data and operand1 shapes", t, t1)
    operand0 = m.per_partition(ins, "operand0", t.partition)
    if operand0 is None:
        raise IllFormed("scalar_tensor_tensor: operand0 is required", illegal=True)
    op0, op1 = m.alu(ins, "op0"), m.alu(ins, "op1")
    r0, r1 = bool(m.attr(ins, "reverse0")), bool(m.attr(ins, "reverse1"))

    def value(idx: Index) -> Poly:
        v = op0(operand0(idx), data(idx)) if r0 else op0(data(idx), operand0(idx))
        return op1(other(idx), v) if r1 else op1(v, other(idx))

    m.free_limit(t)
    m.free_limit(m.write(ins, ins.dst, t.shape, value))


def _reduce_free(op: str, fn: Value, p: Ix, free: Sequence[Ix]) -> Poly:
    """reduce(op) of ``fn`` over the free axes of partition ``p``."""
    if op == "add":
        return _sum_free(fn, p, free)
    names = [nf.fresh("r") for _ in free]
    return nf.reduce_max(REDUCE_OPS[op], tuple(zip(names, free)), fn((p, *(Ix.of(n) for n in names))))


@meaning("tensor_scalar_reduce")
def _tensor_scalar_reduce(m: Machine, ins: Instr) -> None:
    t, data = m.read(ins, "data")
    m.free_limit(t)
    operand0 = m.per_partition(ins, "operand0", t.partition)
    if operand0 is None:
        raise IllFormed("tensor_scalar_reduce: operand0 is required", illegal=True)
    op0, red = m.alu(ins, "op0"), m.attr(ins, "reduce_op")
    m.free_limit(m.write(ins, ins.dst, t.shape, lambda idx: op0(data(idx), operand0(idx))))
    dst_fn, free = m.function(ins.dst), t.shape[1:]
    m.write(ins, str(ins.arg("reduce_res")), (t.partition, Ix(1)), lambda idx: _reduce_free(red, dst_fn, idx[0], free),
            "reduce_res")


@meaning("tensor_copy_predicated")
def _tensor_copy_predicated(m: Machine, ins: Instr) -> None:
    t, src = m.read(ins, "src")
    tp, pred = m.read(ins, "predicate")
    if t.space == tp.space == "psum":
        raise IllFormed("tensor_copy_predicated: src and predicate are both in psum; at most one may be", illegal=True)
    if ins.dst not in m.types:
        raise IllFormed(f"tensor_copy_predicated: writes only part of {ins.dst!r}, which must hold values first",
                        illegal=True)
    _same_shape(m, "tensor_copy_predicated: src and predicate shapes", t, tp)
    _same_shape(m, "tensor_copy_predicated: src and dst shapes", t, m.types[ins.dst])
    old, reverse = m.function(ins.dst), bool(m.attr(ins, "reverse_pred"))

    def value(idx: Index) -> Poly:  # predicate zero: dst keeps its value (reverse_pred: takes src)
        return nf.ite("==", pred(idx), ZERO, src(idx), old(idx)) if reverse else \
            nf.ite("==", pred(idx), ZERO, old(idx), src(idx))

    m.free_limit(t)
    m.free_limit(m.write(ins, ins.dst, t.shape, value))


@meaning("tensor_partition_reduce")
def _tensor_partition_reduce(m: Machine, ins: Instr) -> None:
    t, data = m.read(ins, "data")
    op = m.attr(ins, "op")
    m.free_limit(t)

    def value(idx: Index) -> Poly:
        p = nf.fresh("p")
        body = data((Ix.of(p), *idx[1:]))
        return nf.sum_over(p, t.partition, body) if op == "add" else nf.reduce_max(REDUCE_OPS[op], ((p, t.partition),), body)

    m.write(ins, ins.dst, (Ix(1), *t.shape[1:]), value)


@meaning("bn_stats", "bn_aggr", "max8", "nc_find_index8", "nc_match_replace8", "select_reduce", "range_select", "dropout", "rng",
         "tensor_tensor_scan",
         "tensor_scalar_cumulative",
         "affine_select")
def _kernel_only(m: Machine, ins: Instr) -> None:
    raise IllFormed(f"{ins.op}: a kernel-only instruction (the simulator runs it; its meaning in proofs is not "
                    f"modelled, so no lowering uses it)", illegal=True)


def default_space(ins: Instr) -> str:
    """The memory an instruction writes when its destination's is not given."""
    return ins.space if ins.space is not None else DECLARATIONS[ins.op].default_space(engine(ins))


def engine(ins: Instr) -> str:
    return str(ins.arg("engine", DECLARATIONS[ins.op].engines[0]))
