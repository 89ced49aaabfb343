"""The propagation enumerator: candidate rewrites found by moving one operator past its neighbour.

Candidates are pairs of Programs over the same inputs with symbolic dims (``RuleCandidate``); the
prover decides which are true. Families, each generated from the registry (op kinds, arities and
attributes), never from a list of identities:

- ``through_layout``: a unary or binary element-wise op moved through an index map (transpose,
  broadcast, reshape, expand/squeeze, slice, concat);
- ``distribute_matmul``: a matmul moved through an element-wise binary op of one operand
  (linearity; read right to left, two matmuls sharing an operand become one), and a per-row shift of the
  left operand moved out as a rank-1 correction with the right operand's column sums (a layer norm's mean
  subtraction across the GEMM; float-unsafe left to right, so only read right to left);
- ``scale_matmul``: a scale (mul/div by a scalar, a row or a column vector) moved onto either matmul
  operand, and a scale along the contraction axis moved from the left operand's columns to the right
  operand's rows (a norm's gain folded into the next GEMM's weight, also for a batch of rows against one
  weight); ``transpose_matmul``; ``reduce_matmul``: a reduction of a matmul's output moved onto
  an operand (a GEMM becomes a GEMV);
- ``merge_matmul``: matmuls that read the same left operand merged into one over stacked right operands,
  applied where the siblings exist (a rule with a context, ``patterns.Rule.context``);
- ``scale_conv``: a scale of a convolution's output (mul/div by a scalar or a per-output-channel
  tensor, ``[C, 1, ...]`` or ``[1, C, 1, ...]``) moved into its weight, for every convolution of the
  registry with element semantics, its stride, padding, dilation and groups symbolic (any value);
- ``reduce_binary``: a reduction moved through an element-wise binary op (same shapes, or an operand
  constant along the reduced axis, or a symbolic positive / negative scalar);
- ``binary_binary``: one binary op moved into an operand of another (distributivity, associativity),
  and ``swap``: operand order;
- ``homomorphism``: f(a op b) against f(a) op' f(b) for every unary f and binary op, op';
- ``simplify``: reductions over size-1 axes, transpose of transpose, scale by 1 / add 0, f(f(x));
- ``shift``: removing a max-shift from composites' expansions (softmax, log_softmax);
- ``rescale``: for every unary f proven to be a homomorphism from + to *, the rescaling identity
  f(m1 - m2) * sum(f(x - m1)) = sum(f(x - m2)) that online softmax relies on;
- ``fold``: a composite applied to a matmul or a convolution (with or without a bias), and a
  per-channel affine map (mul then add) applied to a biased convolution, rewritten by the νGraph with
  the rules proven so far (e.g. inference batchnorm folded into the matmul's or the conv's weights and
  bias), proposed as one rule; a convolution's attributes stay symbolic.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from axon_eg.errors import AxonError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.program import Program
from axon_eg.semantics.op_semantics import ATTRIBUTE_DIM_PREFIX, SYMBOLIC_ATTRIBUTES
from axon_eg.semantics.prover import ScalarSymbol

DTYPE = "fp32"


@dataclass(frozen=True)
class RuleCandidate:
    name: str
    family: str
    lhs: Program
    rhs: Program
    symbols: tuple[ScalarSymbol, ...] = field(default=())
    context: tuple[Program, ...] = field(default=())
    """Values that must exist beside the left-hand side for the rule to apply (``patterns.Rule.context``)."""


Build = Callable[..., Value]


def make(name: str, family: str, inputs: Sequence[tuple[str, tuple]], lhs: Build, rhs: Build,
         symbols: Sequence[ScalarSymbol] = (), context: Sequence[Build] = ()) -> RuleCandidate | None:
    """Build both sides (and the context) over the same inputs; None when one is ill-typed (the move does
    not fit)."""
    sides = []
    for fn in (lhs, rhs, *context):
        b = Builder(name)
        values = {n: b.input(n, shape, DTYPE) for n, shape in inputs}
        try:
            sides.append(b.build(fn(b, **values)))
        except AxonError:
            return None
    if sides[0] == sides[1]:
        return None
    return RuleCandidate(name, family, sides[0], sides[1], tuple(symbols), tuple(sides[2:]))


def unary_ops() -> list[O.OpDef]:
    """The unary element-wise ops rules are discovered for (comparisons, logic and ``where``, meta
    ``logical``, are left out: their boolean values would need rules of their own; so are the ops the prover
    keeps opaque, rounding and bit operations)."""
    return [op for op in O.ops_of_kind(O.OpKind.ELEMENTWISE)
            if op.meta.get("arity") == 1 and not op.meta.get("index_dependent") and op.name != "cast"
            and not op.meta.get("logical") and not op.meta.get("opaque")]


def binary_ops() -> list[O.OpDef]:
    return [op for op in O.ops_of_kind(O.OpKind.ELEMENTWISE) if op.meta.get("arity") == 2
            and not op.meta.get("logical") and not op.meta.get("opaque")]


# Attribute values that make an op interesting to enumerate (defaults otherwise).
_SAMPLE_ATTRS = {"clamp": {"lo": -0.5, "hi": 0.5}, "pow": {"exponent": 3.0}, "leaky_relu": {"slope": 0.1}}


def unary(b: Builder, op: O.OpDef, x: Value) -> Value:
    return b.emit(op.name, x, **_SAMPLE_ATTRS.get(op.name, {}))


# ------------------------------------------------------------------------------------------------
# Index maps: (name, inputs, apply(b, x) -> value, apply to a second operand of the same shape)
# ------------------------------------------------------------------------------------------------
def layouts() -> list[tuple[str, tuple, Callable[[Builder, Value], Value]]]:
    return [
        ("transpose2", ("M", "N"), lambda b, x: b.emit("transpose", x, perm=(1, 0))),
        ("transpose3", ("B", "M", "N"), lambda b, x: b.emit("transpose", x, perm=(0, 2, 1))),
        ("transpose3_rot", ("B", "M", "N"), lambda b, x: b.emit("transpose", x, perm=(2, 0, 1))),
        ("broadcast_rows", ("N",), lambda b, x: b.emit("broadcast_to", x, shape=("M", "N"))),
        ("broadcast_cols", ("M", 1), lambda b, x: b.emit("broadcast_to", x, shape=("M", "N"))),
        ("flatten", ("M", "N"), lambda b, x: b.emit("reshape", x, shape=("M*N",))),
        ("merge_batch", ("B", "M", "N"), lambda b, x: b.emit("reshape", x, shape=("B*M", "N"))),
        ("expand_dims", ("M", "N"), lambda b, x: b.emit("expand_dims", x, axis=0)),
        ("squeeze", ("M", 1), lambda b, x: b.emit("squeeze", x, axes=(1,))),
        ("slice", ("M", "N"), lambda b, x: b.emit("slice", x, axis=1, start=1, stop=None, step=1)),
        ("slice_step", ("M", "N"), lambda b, x: b.emit("slice", x, axis=0, start=0, stop=None, step=2)),
    ]


def through_layout() -> Iterator[RuleCandidate]:
    for lname, shape, lay in layouts():
        for op in unary_ops():
            yield make(f"{op.name}_through_{lname}", "through_layout", [("x", shape)],
                       lambda b, x, op=op, lay=lay: unary(b, op, lay(b, x)),
                       lambda b, x, op=op, lay=lay: lay(b, unary(b, op, x)))
        for op in binary_ops():
            yield make(f"{op.name}_through_{lname}", "through_layout", [("x", shape), ("y", shape)],
                       lambda b, x, y, op=op, lay=lay: b.emit(op.name, lay(b, x), lay(b, y)),
                       lambda b, x, y, op=op, lay=lay: lay(b, b.emit(op.name, x, y)))
    for op in unary_ops():  # concat: f applied to each part
        yield make(f"{op.name}_through_concat", "through_layout", [("x", ("M", "N")), ("y", ("M", "K"))],
                   lambda b, x, y, op=op: unary(b, op, b.emit("concat", x, y, axis=1)),
                   lambda b, x, y, op=op: b.emit("concat", unary(b, op, x), unary(b, op, y), axis=1))


# ------------------------------------------------------------------------------------------------
# Matmul neighbours
# ------------------------------------------------------------------------------------------------
MATMULS = [("", ("M", "K"), ("K", "N")), ("batched_", ("B", "M", "K"), ("B", "K", "N"))]
SCALES = [("scalar", ()), ("row", ("M", 1)), ("col", ("N",))]


def _mm(b: Builder, a: Value, w: Value) -> Value:
    return b.emit("matmul", a, w)


def matmul_neighbours() -> Iterator[RuleCandidate]:
    for prefix, sa, sb in MATMULS:
        ins = [("A", sa), ("B", sb)]
        for op in ("mul", "div", "add"):
            for sname, sshape in SCALES:
                shape = sshape if not (prefix and sname == "row") else ("B", "M", 1)
                for side in ("A", "B"):
                    def rhs(b, A, B, s, op=op, side=side):
                        return _mm(b, b.emit(op, A, s), B) if side == "A" else _mm(b, A, b.emit(op, B, s))
                    yield make(f"{prefix}{op}_{sname}_through_matmul_{side}", "scale_matmul", ins + [("s", shape)],
                               lambda b, A, B, s, op=op: b.emit(op, _mm(b, A, B), s), rhs)
        rank = len(sa)
        perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
        t = lambda b, x, perm=perm: b.emit("transpose", x, perm=perm)  # noqa: E731
        yield make(f"{prefix}transpose_through_matmul", "transpose_matmul", ins,
                   lambda b, A, B, t=t: t(b, _mm(b, A, B)), lambda b, A, B, t=t: _mm(b, t(b, B), t(b, A)))
        yield make(f"{prefix}transpose_through_matmul_unswapped", "transpose_matmul", ins,
                   lambda b, A, B, t=t: t(b, _mm(b, A, B)), lambda b, A, B, t=t: _mm(b, t(b, A), t(b, B)))
        for red in ("sum", "mean", "max"):
            for axis in (rank - 2, rank - 1):
                for keep in (True, False):
                    for side in ("A", "B"):
                        ax = rank - 2 if side == "A" else rank - 1  # the operand axis that survives into `axis`

                        def rhs(b, A, B, red=red, keep=keep, side=side, ax=ax, axis=axis):
                            if side == "A":
                                out = _mm(b, b.emit(red, A, axes=(ax,), keepdims=True), B)
                            else:
                                out = _mm(b, A, b.emit(red, B, axes=(ax,), keepdims=True))
                            return out if keep else b.emit("squeeze", out, axes=(axis,))
                        yield make(f"{prefix}{red}{axis}{'_keep' if keep else ''}_into_matmul_{side}", "reduce_matmul",
                                   ins, lambda b, A, B, red=red, axis=axis, keep=keep:
                                   b.emit(red, _mm(b, A, B), axes=(axis,), keepdims=keep), rhs)
        # a scale along the contraction axis moved from one operand to the other: A's columns scaled by s[K]
        # are B's rows scaled by s (a norm's weight folded into the next GEMM's weights: rmsnorm(x, g) @ W =
        # rms(x) * (x @ (g * W)) once the per-row statistic has moved out too, ``mul_row_through_matmul_A``)
        # (and for a batch of rows against one weight, ``linear`` on a 3-d activation)
        for op in ("mul", "div"):
            for pre, shapes in ((prefix, ins), *((("broadcast_", [("A", sa), ("B", ("K", "N"))]),) if prefix else ())):
                yield make(f"{pre}{op}_k_through_matmul", "scale_matmul", shapes + [("s", ("K",))],
                           lambda b, A, B, s, op=op: _mm(b, b.emit(op, A, s), B),
                           lambda b, A, B, s, op=op: _mm(b, A, b.emit(op, B, b.emit("expand_dims", s, axis=-1))))
        # a per-row shift of the left operand moved out as a rank-1 correction: (A - r) @ B = A @ B - r * (1^T B)
        # (a layer norm's mean subtraction folded across the GEMM: the column sums of B are a weight fact)
        row, k_axis = (("B", "M", 1), 1) if prefix else (("M", 1), 0)
        for op in ("add", "sub"):
            yield make(f"{prefix}{op}_row_shift_out_of_matmul_A", "distribute_matmul", ins + [("r", row)],
                       lambda b, A, B, r, op=op: _mm(b, b.emit(op, A, r), B),
                       lambda b, A, B, r, op=op, k_axis=k_axis: b.emit(
                           op, _mm(b, A, B), b.emit("mul", r, b.emit("sum", B, axes=(k_axis,), keepdims=True))))
        # matmul moved through an element-wise binary op of one operand (linearity: add and sub hold, the
        # others are refuted); read right to left, two matmuls sharing an operand become one (LoRA's
        # x @ W + x @ (A @ B) = x @ (W + A @ B))
        for op in binary_ops():
            for side in ("A", "B"):
                second = ("A2", sa) if side == "A" else ("B2", sb)

                def lhs(b, A, B, op=op.name, side=side, **other):
                    (o,) = other.values()
                    return _mm(b, b.emit(op, A, o), B) if side == "A" else _mm(b, A, b.emit(op, B, o))

                def rhs(b, A, B, op=op.name, side=side, **other):
                    (o,) = other.values()
                    return b.emit(op, _mm(b, A, B), _mm(b, o, B) if side == "A" else _mm(b, A, o))
                yield make(f"{prefix}matmul_{side}_distributes_over_{op.name}", "distribute_matmul",
                           ins + [second], lhs, rhs)
    # associativity: the second matmul moved into the first's right operand
    yield make("matmul_assoc", "binary_binary", [("A", ("M", "K")), ("B", ("K", "L")), ("C", ("L", "N"))],
               lambda b, A, B, C: _mm(b, _mm(b, A, B), C), lambda b, A, B, C: _mm(b, A, _mm(b, B, C)))
    yield make("matmul_comm", "swap", [("A", ("M", "M")), ("B", ("M", "M"))],
               lambda b, A, B: _mm(b, A, B), lambda b, A, B: _mm(b, B, A))


# ------------------------------------------------------------------------------------------------
# Sibling matmuls: GEMMs that read the same left operand, merged into one over the stacked right operands
# ------------------------------------------------------------------------------------------------
SIBLING_SHAPES = [("", ("M", "K"), ("K", "N")), ("batched_", ("B", "M", "K"), ("B", "K", "N")),
                  ("broadcast_", ("B", "M", "K"), ("K", "N"))]
SIBLINGS = (2, 3)


def sibling_matmuls() -> Iterator[RuleCandidate]:
    """``A @ B_p`` is part ``p`` of ``A @ stack(B_1, ..., B_n)`` (the right operands stacked on a new leading
    axis, which the matmul broadcasts ``A`` against), read back by a slice of int bounds and a squeeze, where
    every other ``A @ B_j`` exists too (the rule's context): two or three GEMMs reading one activation (a
    SwiGLU's gate and up projections, attention's q, k and v) become one GEMM over stacked weights, whose
    halves the epilogue reads. The weights are parameters, so the stack is built once where the module is
    frozen (``FusionPlan.static_groups``). Sliced on the new axis, the bounds are ints; a concat along ``N``
    would need a slice bound of ``N_1`` on an axis ``N_1 + N_2`` long, which slice bounds cannot state."""
    for prefix, sa, sb in SIBLING_SHAPES:
        lead = len(sa) + 1 - len(sb)  # leading axes the stacked operand needs: rank(A) + 1 in all
        for n in SIBLINGS:
            names = tuple(f"B{j}" for j in range(n))
            ins = [("A", sa)] + [(name, sb) for name in names]

            def rhs(b, A, p, names=names, lead=lead, **B):
                parts = []
                for name in names:
                    v = B[name]
                    for _ in range(lead):
                        v = b.emit("expand_dims", v, axis=0)
                    parts.append(v)
                big = _mm(b, A, b.emit("concat", *parts, axis=0))
                return b.emit("squeeze", b.emit("slice", big, axis=0, start=p, stop=p + 1, step=1), axes=(0,))
            for p in range(n):
                yield make(f"{prefix}matmul_sibling_{p}_of_{n}", "merge_matmul", ins,
                           lambda b, A, p=p, **B: _mm(b, A, B[f"B{p}"]),
                           lambda b, A, p=p, rhs=rhs, **B: rhs(b, A, p, **B),
                           context=[lambda b, A, j=j, **B: _mm(b, A, B[f"B{j}"]) for j in range(n) if j != p])


# ------------------------------------------------------------------------------------------------
# Convolution neighbours: its attributes symbolic, so one rule covers every stride, padding, ...
# ------------------------------------------------------------------------------------------------
def convolutions() -> list[O.OpDef]:
    """The convolutions whose semantics take their attributes symbolically (``SYMBOLIC_ATTRIBUTES``)."""
    return [op for op in O.ops_of_kind(O.OpKind.LIBRARY) if op.name in SYMBOLIC_ATTRIBUTES]


def conv_setting(op: O.OpDef) -> tuple[list[tuple[str, tuple]], dict]:
    """A convolution's inputs over symbolic dims (x: [N, C*groups, H, ...], w: [O, C, K, ...]) and its
    attributes as symbolic dims, each at its least value or more (``instantiate`` names them the same way)."""
    n = int(op.meta["spatial"])
    attrs: dict = {}
    for a in op.attrs:
        least = SYMBOLIC_ATTRIBUTES[op.name].get(a.name)
        if least is None:
            continue
        one = lambda name, least=least: D.add(D.sym(f"{ATTRIBUTE_DIM_PREFIX}{name}"), least - 1)  # noqa: E731
        attrs[a.name] = tuple(one(f"{a.name}{j}") for j in range(n)) if a.kind == "ints" else one(a.name)
    x = ("N", D.mul(D.sym("C"), attrs["groups"]), *("H", "W", "Z")[:n])
    w = ("O", "C", *("K", "L", "J")[:n])
    return [("x", x), ("w", w)], attrs


def _channel(b: Builder, v: Value, rank: int) -> Value:
    """A per-channel [O] vector viewed as [O, 1, ...] along axis 1 of a rank-``rank`` tensor."""
    return b.emit("reshape", v, shape=(v.shape[0],) + (1,) * (rank - 2))


def conv_neighbours() -> Iterator[RuleCandidate]:
    for conv in convolutions():
        ins, attrs = conv_setting(conv)
        n = int(conv.meta["spatial"])
        c = lambda b, x, w, conv=conv, attrs=attrs: b.emit(conv.name, x, w, **attrs)  # noqa: E731
        scales = [("scalar", (), lambda b, s: s),  # s as the weight's factor
                  ("channel", ("O",) + (1,) * n, lambda b, s, n=n: b.emit("expand_dims", s, axis=n + 1)),
                  ("channel_lead", (1, "O") + (1,) * n,
                   lambda b, s, n=n: b.emit("expand_dims", b.emit("squeeze", s, axes=(0,)), axis=n + 1))]
        for op in ("mul", "div"):
            for sname, shape, factor in scales:
                yield make(f"{op}_{sname}_into_{conv.name}", "scale_conv", ins + [("s", shape)],
                           lambda b, x, w, s, op=op, c=c: b.emit(op, c(b, x, w), s),
                           lambda b, x, w, s, op=op, c=c, factor=factor: c(b, x, b.emit(op, w, factor(b, s))))


# ------------------------------------------------------------------------------------------------
# Reductions through element-wise binary ops
# ------------------------------------------------------------------------------------------------
REDUCTIONS = O.simple_reductions()  # sum, mean, max, min: one combine each (logsumexp is built from two)


def reduce_binary() -> Iterator[RuleCandidate]:
    for red in REDUCTIONS:
        for op in binary_ops():
            r = lambda b, x, red=red: b.emit(red, x, axes=(1,), keepdims=True)  # noqa: E731
            for kind, shape in (("same", ("M", "N")), ("rowconst", ("M", 1))):
                yield make(f"{red}_through_{op.name}_{kind}", "reduce_binary", [("a", ("M", "N")), ("c", shape)],
                           lambda b, a, c, op=op, r=r: r(b, b.emit(op.name, a, c)),
                           lambda b, a, c, op=op, r=r, kind=kind:
                           b.emit(op.name, r(b, a), r(b, c) if kind == "same" else c))
            for sign in (">0", "<0"):  # c: a symbolic scalar (a rank-0 input the rule matches as any constant)
                sym = ScalarSymbol("c", sign)
                for flip in (False, True):
                    other = {"max": "min", "min": "max"}.get(red, red) if flip else red
                    yield make(f"{red}_through_{op.name}_scalar{sign}{'_flip' if flip else ''}", "reduce_binary",
                               [("a", ("M", "N")), ("c", ())],
                               lambda b, a, c, op=op, r=r: r(b, b.emit(op.name, a, c)),
                               lambda b, a, c, op=op, other=other: b.emit(
                                   op.name, b.emit(other, a, axes=(1,), keepdims=True), c),
                               [sym])
    for red in REDUCTIONS:  # reduction of a reduction: one reduction over both axes
        yield make(f"{red}_of_{red}", "reduce_binary", [("x", ("M", "N", "K"))],
                   lambda b, x, red=red: b.emit(red, b.emit(red, x, axes=(2,), keepdims=False), axes=(1,), keepdims=False),
                   lambda b, x, red=red: b.emit(red, x, axes=(1, 2), keepdims=False))
        for rank in (2, 3, 4):  # a full reduction as the reduction of its rows' reductions (a loss's total of a
            # row-wise term: the rows' reductions then fuse into the kernel that makes the term, which never
            # goes through memory at full size)
            yield make(f"{red}_of_row_{red}s_rank{rank}", "reduce_binary", [("x", ("M", "N", "K", "L")[:rank])],
                       lambda b, x, red=red, rank=rank: b.emit(
                           red, b.emit(red, x, axes=(rank - 1,), keepdims=False), axes=tuple(range(rank - 1)),
                           keepdims=False),
                       lambda b, x, red=red, rank=rank: b.emit(red, x, axes=tuple(range(rank)), keepdims=False))
        yield make(f"{red}_through_transpose", "reduce_binary", [("x", ("M", "N"))],
                   lambda b, x, red=red: b.emit(red, b.emit("transpose", x, perm=(1, 0)), axes=(0,), keepdims=False),
                   lambda b, x, red=red: b.emit(red, x, axes=(1,), keepdims=False))


def binary_binary() -> Iterator[RuleCandidate]:
    ins = [("a", ("N",)), ("b_", ("N",)), ("c", ("N",))]
    for outer, inner in itertools.product(binary_ops(), repeat=2):
        o, i = outer.name, inner.name
        yield make(f"{o}_distributes_over_{i}", "binary_binary", ins,
                   lambda b, a, b_, c, o=o, i=i: b.emit(o, b.emit(i, a, b_), c),
                   lambda b, a, b_, c, o=o, i=i: b.emit(i, b.emit(o, a, c), b.emit(o, b_, c)))
        yield make(f"{o}_into_{i}", "binary_binary", ins,
                   lambda b, a, b_, c, o=o, i=i: b.emit(o, b.emit(i, a, b_), c),
                   lambda b, a, b_, c, o=o, i=i: b.emit(i, a, b.emit(o, b_, c)))
    for op in binary_ops():
        yield make(f"{op.name}_swap", "swap", [("a", ("N",)), ("b_", ("N",))],
                   lambda b, a, b_, op=op: b.emit(op.name, a, b_), lambda b, a, b_, op=op: b.emit(op.name, b_, a))


def homomorphisms() -> Iterator[RuleCandidate]:
    for f in unary_ops():
        for inner, outer in itertools.product(binary_ops(), repeat=2):
            yield make(f"{f.name}_{inner.name}_to_{outer.name}", "homomorphism", [("a", ("N",)), ("b_", ("N",))],
                       lambda b, a, b_, f=f, i=inner.name: unary(b, f, b.emit(i, a, b_)),
                       lambda b, a, b_, f=f, o=outer.name: b.emit(o, unary(b, f, a), unary(b, f, b_)))


def simplifications() -> Iterator[RuleCandidate]:
    for red in O.ops_of_kind(O.OpKind.REDUCE):
        if red.meta.get("indices"):  # argmax / argmin: no element semantics to prove against
            continue
        for keep in (True, False):
            yield make(f"{red.name}_over_size1{'_keep' if keep else ''}", "simplify", [("x", ("M", 1))],
                       lambda b, x, r=red.name, keep=keep: b.emit(r, x, axes=(1,), keepdims=keep),
                       lambda b, x, keep=keep: x if keep else b.emit("squeeze", x, axes=(1,)))
    for p1, p2 in itertools.product([(1, 0, 2), (0, 2, 1), (2, 0, 1), (1, 2, 0)], repeat=2):
        composed = tuple(p1[p] for p in p2)
        yield make(f"transpose{''.join(map(str, p1))}_transpose{''.join(map(str, p2))}", "simplify",
                   [("x", ("B", "M", "N"))],
                   lambda b, x, p1=p1, p2=p2: b.emit("transpose", b.emit("transpose", x, perm=p1), perm=p2),
                   lambda b, x, c=composed: x if c == (0, 1, 2) else b.emit("transpose", x, perm=c))
    yield make("transpose_transpose", "simplify", [("x", ("M", "N"))],
               lambda b, x: b.emit("transpose", b.emit("transpose", x, perm=(1, 0)), perm=(1, 0)), lambda b, x: x)
    for op in binary_ops():
        for value in (0.0, 1.0):
            yield make(f"{op.name}_by_{int(value)}", "simplify", [("x", ("N",))],
                       lambda b, x, op=op, v=value: b.emit(op.name, x, b.constant(v, DTYPE)), lambda b, x: x)
    for f in unary_ops():
        yield make(f"{f.name}_idempotent", "simplify", [("x", ("N",))],
                   lambda b, x, f=f: unary(b, f, unary(b, f, x)), lambda b, x, f=f: unary(b, f, x))
        yield make(f"{f.name}_involution", "simplify", [("x", ("N",))],
                   lambda b, x, f=f: unary(b, f, unary(b, f, x)), lambda b, x: x)
        for g in unary_ops():
            if g.name != f.name:
                yield make(f"{f.name}_inverts_{g.name}", "simplify", [("x", ("N",))],
                           lambda b, x, f=f, g=g: unary(b, f, unary(b, g, x)), lambda b, x: x)


# ------------------------------------------------------------------------------------------------
# Families derived from the registry's composites and from proven facts
# ------------------------------------------------------------------------------------------------
def shift_removal() -> Iterator[RuleCandidate]:
    """In each composite's expansion, drop a subtraction of a max over the same tensor."""
    for comp in O.ops_of_kind(O.OpKind.COMPOSITE):
        if comp.arity[0] != 1:
            continue
        b = Builder(comp.name)
        x = b.input("x", ("M", "N"), DTYPE)
        try:
            original = b.build(b.emit(comp.name, x)).expand()
        except AxonError:
            continue
        for i, node in enumerate(original.nodes):
            if node.op != "sub":
                continue
            a, m = node.inputs
            if original.nodes[m].op == "max" and original.nodes[m].inputs == (a,):
                yield RuleCandidate(f"{comp.name}_drop_max_shift", "shift", original, _bypass(original, i, a))


def _bypass(program: Program, node: int, replacement: int) -> Program:
    """The program with every use of ``node`` replaced by ``replacement``."""
    b = Builder(program.name)
    values: dict[int, Value] = {}
    for i, n in enumerate(program.nodes):
        if i == node:
            values[i] = values[replacement]
        elif n.is_input:
            values[i] = b.input(n.attrs["name"], n.shape, n.dtype)
        else:
            values[i] = b.emit(n.op, *[values[j] for j in n.inputs], **dict(n.attrs))
    return b.build([values[o] for o in program.outputs])


def rescaling(homomorphic: Sequence[str]) -> Iterator[RuleCandidate]:
    """For f with f(a + b) = f(a) * f(b): f(m1 - m2) * sum(f(x - m1)) = sum(f(x - m2))."""
    for f in homomorphic:
        yield make(f"{f}_online_rescale", "rescale", [("x", ("M", "N")), ("m1", ("M", 1)), ("m2", ("M", 1))],
                   lambda b, x, m1, m2, f=f: b.emit("mul", b.emit(f, b.emit("sub", m1, m2)),
                                                     b.emit("sum", b.emit(f, b.emit("sub", x, m1)), axes=(1,), keepdims=True)),
                   lambda b, x, m1, m2, f=f: b.emit("sum", b.emit(f, b.emit("sub", x, m2)), axes=(1,), keepdims=True))


def folds(rules: Sequence) -> Iterator[RuleCandidate]:
    """A composite (with per-channel statistics) applied to a matmul, with or without a bias added
    (a ``Linear``), rewritten by the νGraph with the rules proven so far; the cheapest different
    variant is proposed as one rule (proved and float-tested on its own: the search may use rule
    directions that are unsafe alone). Then the same for convolutions (``conv_folds``)."""
    yield from matmul_folds(rules)
    yield from conv_folds(rules)


def matmul_folds(rules: Sequence) -> Iterator[RuleCandidate]:
    # lazy: loads egglog, for the fold search only (the store imports this module, through to_rule)
    from axon_eg.egraph.nugraph import Limits, NuGraph

    for comp in O.ops_of_kind(O.OpKind.COMPOSITE):
        lo, hi = comp.arity
        if hi < 2:
            continue
        for biased in (False, True):
            b = Builder(comp.name)
            A, B = b.input("A", ("M", "K"), DTYPE), b.input("B", ("K", "N"), DTYPE)
            y = b.emit("matmul", A, B)
            if biased:
                y = b.emit("add", y, b.input("bias_in", ("N",), DTYPE))
            stats = [b.input(n, ("N",), DTYPE) for n in comp.inputs[1:hi]]
            try:
                lhs = b.build(b.emit(comp.name, y, *stats, **_axis_last(comp))).expand()
                graph = NuGraph(lhs.bind({"M": 256, "K": 8, "N": 8}), rules)  # many rows: folding pays
                graph.saturate(Limits(iterations=12, nodes=20_000, seconds=10))
            except AxonError:
                continue
            for variant in graph.extract(8)[1:]:
                ops = [n.op for n in variant.program.nodes]
                if ops.count("matmul") == 1 and _last_op_or_before_add(variant.program, "matmul"):
                    rhs = Program(variant.program.nodes, variant.program.outputs, (), lhs.name, (), ())
                    where = "biased_matmul" if biased else "matmul"
                    yield RuleCandidate(f"{comp.name}_folded_into_{where}", "fold", lhs, rhs)
                    break


# The sizes the conv fold search binds: an activation much larger than the weight (folding pays). The
# kernel dims and the symbolic attributes (stride 2, padding 1: its dim is the padding + 1) are made
# literal first: the νGraph's generic sizes (``egraph.schema``, a prime per named dim) would make a
# named kernel larger than a named input, and the window's generic size nonsense.
CONV_SEARCH = {"N": 4, "C": 4, "O": 8, "H": 12, "W": 12, "Z": 12}
CONV_SEARCH_LITERAL = {"K": 3, "L": 3, "J": 3}
CONV_SEARCH_ATTRS = {"stride": 2, "padding": 2, "dilation": 1, "groups": 1}


def conv_folds(rules: Sequence) -> Iterator[RuleCandidate]:
    """A composite with per-channel statistics along axis 1 (batchnorm), and a per-channel affine map
    (``x * s + t``, s and t [O] vectors viewed along the channel axis) after a biased convolution, applied
    to each convolution with symbolic attributes (``conv_setting``), with and without a bias; the
    νGraph searches at concrete sizes and attributes (``CONV_SEARCH``), and the variant with one
    convolution followed by at most one add is proposed with the lhs's symbolic attributes put back."""
    # lazy: loads egglog, for the fold search only (the store imports this module, through to_rule)
    from axon_eg.egraph.nugraph import Limits, NuGraph

    appliers: list[tuple[str, Sequence[str], Callable[..., Value] | None]] = []
    for comp in O.ops_of_kind(O.OpKind.COMPOSITE):
        if comp.arity[1] >= 2 and any(a.name == "axis" for a in comp.attrs):
            appliers.append((comp.name, comp.inputs[1:comp.arity[1]],
                             lambda b, y, *stats, comp=comp: b.emit(comp.name, y, *stats, axis=1)))
    appliers.append(("affine", ("scale", "shift"), lambda b, y, s, t: b.emit(
        "add", b.emit("mul", y, _channel(b, s, len(y.shape))), _channel(b, t, len(y.shape)))))
    for conv in convolutions():
        ins, attrs = conv_setting(conv)
        for name, stat_names, apply in appliers:
            for biased in (False, True):
                if name == "affine" and not biased:  # x * s + t after an unbiased conv is scale_conv's
                    continue
                b = Builder(name)
                x, w = (b.input(k, shape, DTYPE) for k, shape in ins)
                args = [x, w] + ([b.input("bias_in", ("O",), DTYPE)] if biased else [])
                stats = [b.input(k, ("O",), DTYPE) for k in stat_names]
                try:
                    lhs = b.build(apply(b, b.emit(conv.name, *args, **attrs), *stats)).expand()
                    literal = {k: CONV_SEARCH_ATTRS[k[len(ATTRIBUTE_DIM_PREFIX):].rstrip("012")]
                               for k in lhs.free_dims if k.startswith(ATTRIBUTE_DIM_PREFIX)}
                    searched = lhs.specialize({**literal, **{k: v for k, v in CONV_SEARCH_LITERAL.items()
                                                             if k in lhs.free_dims}})
                    graph = NuGraph(searched.bind({k: v for k, v in CONV_SEARCH.items() if k in searched.free_dims}),
                                    rules)
                    graph.saturate(Limits(iterations=12, nodes=20_000, seconds=10))
                except AxonError:
                    continue
                for variant in graph.extract(8)[1:]:
                    ops = [nd.op for nd in variant.program.nodes]
                    if ops.count(conv.name) == 1 and _last_op_or_before_add(variant.program, conv.name):
                        try:
                            rhs = _with_attrs(variant.program, lhs, conv.name, attrs)
                        except AxonError:
                            continue
                        where = f"biased_{conv.name}" if biased else conv.name
                        yield RuleCandidate(f"{name}_folded_into_{where}", "fold", lhs, rhs)
                        break


def _with_attrs(program: Program, like: Program, op: str, attrs: dict) -> Program:
    """``program`` rebuilt over ``like``'s inputs (its symbolic shapes) with every ``op`` node's attributes
    ``attrs`` (the symbolic ones the search had made concrete)."""
    b = Builder(like.name)
    specs = {s.name: s for s in like.inputs}
    values: list[Value] = []
    for n in program.nodes:
        if n.is_input:
            spec = specs[n.attrs["name"]]
            values.append(b.input(spec.name, spec.shape, spec.dtype))
        else:
            a = {**dict(n.attrs), **attrs} if n.op == op else dict(n.attrs)
            values.append(b.emit(n.op, *[values[j] for j in n.inputs], **a))
    return b.build([values[o] for o in program.outputs])


def _axis_last(comp: O.OpDef) -> dict:
    return {"axis": 1} if any(a.name == "axis" for a in comp.attrs) else {}


def _last_op_or_before_add(program: Program, op: str) -> bool:
    """The folded form: ``op`` (a matmul, a conv) followed by at most one bias add (no per-element work
    after it)."""
    out = program.nodes[program.outputs[0]]
    if out.op == op:
        return True
    return out.op == "add" and any(program.nodes[j].op == op for j in out.inputs)


def phase_one() -> list[RuleCandidate]:
    """Every candidate that needs no proven facts, deduplicated, in a deterministic order."""
    out: list[RuleCandidate] = []
    for family in (through_layout, matmul_neighbours, sibling_matmuls, conv_neighbours, reduce_binary, binary_binary,
                   homomorphisms, simplifications, shift_removal):
        out += [c for c in family() if c is not None]
    return out


__all__ = ["RuleCandidate", "folds", "make", "phase_one", "rescaling"]
