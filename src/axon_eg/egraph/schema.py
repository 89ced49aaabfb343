"""egglog declarations generated from the operator registry.

One egglog constructor per registry primitive (``T_matmul``, ``T_sum``; ops with a variable number
of inputs get one per count: ``T_concat__3``), attributes as egglog primitives. Alongside, the
analyses every tensor e-class carries, all computed by egglog rules (in Rust):

- ``shape``: the concrete shape as ``(Vec i64)``, by one rule set per *shape family* of the registry
  (``ops.shape_family``). ``shape`` has no merge function, so a rewrite that equates tensors of
  different shapes makes egglog raise; the νGraph turns that into ``UnsoundRewrite``.
- ``dtype``: the registry's dtype rule (the dtype attribute, else promotion over the inputs).
- ``cost_<constructor>``: a per-e-node cost (bytes moved plus flops scaled to bytes), keyed like the
  constructor, so extraction reads costs computed inside egglog.

Symbolic dims live in the ``Dim`` datatype (``DVar "M"``, ``DAdd``, ``DMul``, ``DDiv``) so that
attributes such as a reshape target keep their symbolic form; ``dval`` gives their bound value.

Each tensor has two shapes: ``shape`` with the bound sizes (costs read it) and ``gshape``, the
*symbolic* shape, computed by the same shape rules from ``gval``: every named dim gets a distinct
generic value (a prime no literal size of the program uses), so two entries of ``gshape`` are
equal exactly when the symbolic dims are (up to a collision of sums, which the symbolic rebuild of
an extracted variant would catch). Rule conditions read ``gshape``: a rule proved for ``dim = 1``
or for equal dims fires where that holds for every size, never because two named dims happen to be
bound to the same size. ``gshape`` has no merge function either: a rewrite that equates tensors of
different symbolic shapes is unsound even when their sizes agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from axon_eg.ir import ops as O
from axon_eg.ir.dtypes import DTYPES, promote

MAX_RANK = 6
MAX_VARIADIC = 8  # constructors per variadic op: 1..8 inputs; a wider nestable node enters as a tree of them
                  # (NuGraph: Program.nest_wide(MAX_VARIADIC))
ANALYSIS = "analysis"

ATTR_SORTS = {"int": "i64", "float": "f64", "bool": "bool", "str": "String", "ints": "IVec", "dim": "Dim",
              "dims": "DVec", "dtype": "String"}


@dataclass(frozen=True)
class Constructor:
    """One egglog constructor: a registry op at one input count."""

    name: str
    op: O.OpDef
    n_inputs: int

    @property
    def attr_names(self) -> list[str]:
        return [a.name for a in self.op.attrs]

    def sorts(self) -> list[str]:
        out = ["T"] * self.n_inputs
        for a in self.op.attrs:
            kind = a.kind.removeprefix("optional_")  # after canon the value is never None
            if kind not in ATTR_SORTS:
                raise TypeError(f"attribute {a.name} of {self.op.name} ({a.kind}) has no egglog sort")
            out.append(ATTR_SORTS[kind])
        return out

    def pattern(self, **fixed: str) -> str:
        """``(T_op i0 i1 a_axes a_keepdims)``; ``fixed`` replaces attribute variables by literals."""
        args = [f"i{k}" for k in range(self.n_inputs)] + [fixed.get(f"a_{n}", f"a_{n}") for n in self.attr_names]
        return f"({self.name} {' '.join(args)})" if args else f"({self.name})"


def egraph_ops() -> list[O.OpDef]:
    """Registry ops that live in the νGraph: every op except composites (expanded before entry)."""
    return [op for op in O.all_ops() if op.kind is not O.OpKind.COMPOSITE]


def constructor_name(op: O.OpDef, n_inputs: int) -> str:
    lo, hi = op.arity
    return f"T_{op.name}" if lo == hi else f"T_{op.name}__{n_inputs}"


@cache
def constructors() -> tuple[Constructor, ...]:
    out = []
    for op in egraph_ops():
        lo, hi = op.arity
        for n in range(lo, (hi if hi is not None else MAX_VARIADIC) + 1):
            out.append(Constructor(constructor_name(op, n), op, n))
    return tuple(out)


@cache
def constructor_by_name() -> dict[str, Constructor]:
    return {c.name: c for c in constructors()}


def constructor_for(op_name: str, n_inputs: int) -> Constructor:
    op = O.get(op_name)
    name = constructor_name(op, n_inputs)
    try:
        return constructor_by_name()[name]
    except KeyError:
        raise O.InvalidAttribute(f"{op_name} with {n_inputs} inputs has no νGraph constructor") from None


# ------------------------------------------------------------------------------------------------
# Helpers for generated egglog text
# ------------------------------------------------------------------------------------------------
def _vec(items: list[str]) -> str:
    return f"(vec-of {' '.join(items)})" if items else "(vec-empty)"


def _get(vec: str, i: int | str) -> str:
    return f"(vec-get {vec} {i})"


def _sum(terms: list[str]) -> str:
    out = terms[0]
    for t in terms[1:]:
        out = f"(+ {out} {t})"
    return out


def _product(terms: list[str]) -> str:
    if not terms:
        return "1"
    out = terms[0]
    for t in terms[1:]:
        out = f"(* {out} {t})"
    return out


def _shape_inputs(c: Constructor) -> str:
    return " ".join(f"(= s{k} (shape i{k}))" for k in range(c.n_inputs))


def _set_shape(c: Constructor, query: str, value: str, **fixed: str) -> str:
    return f"(rule ((= t {c.pattern(**fixed)}) {query}) ((set (shape t) {value})) :ruleset {ANALYSIS})"


# ------------------------------------------------------------------------------------------------
# Shape rules, one generator per shape family
# ------------------------------------------------------------------------------------------------
def _shape_same(c: Constructor) -> list[str]:
    return [_set_shape(c, "(= s0 (shape i0))", "s0")]


def _shape_broadcast(c: Constructor) -> list[str]:
    """Two inputs broadcast together; a third (``where``) against their broadcast."""
    pat = c.pattern()
    rules = [f"(rule ((= t {pat}) (= s0 (shape i0)) (= s1 (shape i1))) ((need-bcast s0 s1)) :ruleset {ANALYSIS})"]
    query, out = "(= s0 (shape i0)) (= s1 (shape i1)) (= b1 (bcast s0 s1))", "b1"
    for k in range(2, c.n_inputs):
        rules.append(f"(rule ((= t {pat}) {query} (= s{k} (shape i{k}))) ((need-bcast {out} s{k})) "
                     f":ruleset {ANALYSIS})")
        query += f" (= s{k} (shape i{k})) (= b{k} (bcast {out} s{k}))"
        out = f"b{k}"
    return rules + [_set_shape(c, query, out)]


def _remove_axes(vec: str, axes: str, k: int) -> str:
    out = vec
    for j in reversed(range(k)):  # axes are sorted ascending: remove from the back
        out = f"(vec-remove {out} {_get(axes, j)})"
    return out


def _shape_reduce(c: Constructor) -> list[str]:
    rules = []
    for k in range(MAX_RANK + 1):  # k = 0: a reduction over no axes (of a rank-0 tensor)
        kept = "s0"
        for j in range(k):
            kept = f"(vec-set {kept} {_get('a_axes', j)} 1)"
        q = f"(= s0 (shape i0)) (= (vec-length a_axes) {k})"
        rules.append(_set_shape(c, q, kept, a_keepdims="true"))
        rules.append(_set_shape(c, q, _remove_axes("s0", "a_axes", k), a_keepdims="false"))
    return rules


def _shape_matmul(c: Constructor) -> list[str]:
    pat = c.pattern()
    batch = "(vec-pop (vec-pop s0)) (vec-pop (vec-pop s1))"
    m = _get("s0", "(- (vec-length s0) 2)")
    n = _get("s1", "(- (vec-length s1) 1)")
    return [
        f"(rule ((= t {pat}) (= s0 (shape i0)) (= s1 (shape i1))) ((need-bcast {batch})) :ruleset {ANALYSIS})",
        _set_shape(c, f"(= s0 (shape i0)) (= s1 (shape i1)) (= b (bcast {batch}))", f"(vec-push (vec-push b {m}) {n})"),
    ]


def _shape_transpose(c: Constructor) -> list[str]:
    return [
        _set_shape(c, f"(= s0 (shape i0)) (= (vec-length a_perm) {r})",
                   _vec([_get("s0", _get("a_perm", i)) for i in range(r)]))
        for r in range(MAX_RANK + 1)
    ]


def _dvals(vec: str, r: int) -> str:
    """The bound sizes of a dim vector's first ``r`` entries, read from ``dget`` (``_dim_entries``)."""
    return " ".join(f"(= v{i} (dget {vec} {i}))" for i in range(r))


def _dim_entries(c: Constructor, vec: str) -> list[str]:
    """Rules setting ``(dget vec k)`` to the bound size of entry ``k`` of the constructor's dim vector, one
    entry per rule. A shape rule then reads each entry by its key (``_dvals``): with ``(dval (vec-get vec k))``
    for every entry in one query, egglog's join scanned the whole ``dval`` table once per entry, a product
    over the entries (a rank-5 reshape in a program with a few dozen distinct sizes took seconds to analyse)."""
    return [f"(rule ((= t {c.pattern()}) (< {k} (vec-length {vec})) (= v (dval {_get(vec, k)}))) "
            f"((set (dget {vec} {k}) v)) :ruleset {ANALYSIS})" for k in range(MAX_RANK)]


def _shape_reshape(c: Constructor) -> list[str]:
    return _dim_entries(c, "a_shape") + [
        _set_shape(c, f"(= s0 (shape i0)) (= (vec-length a_shape) {r}) {_dvals('a_shape', r)}",
                   _vec([f"v{i}" for i in range(r)]))
        for r in range(MAX_RANK + 1)
    ]


def _shape_expand_dims(c: Constructor) -> list[str]:
    rules = []
    for r in range(MAX_RANK):
        for axis in range(r + 1):
            items = [_get("s0", i) for i in range(r)]
            items.insert(axis, "1")
            rules.append(_set_shape(c, f"(= s0 (shape i0)) (= (vec-length s0) {r})", _vec(items), a_axis=str(axis)))
    return rules


def _shape_squeeze(c: Constructor) -> list[str]:
    return [
        _set_shape(c, f"(= s0 (shape i0)) (= (vec-length a_axes) {k})", _remove_axes("s0", "a_axes", k))
        for k in range(MAX_RANK + 1)
    ]


def _shape_slice(c: Constructor) -> list[str]:
    size = "(/ (+ (- hi lo) (- a_step 1)) a_step)"
    return [_set_shape(c, "(= s0 (shape i0)) (= lo (dval a_start)) (= hi (dval a_stop))",
                       f"(vec-set s0 a_axis {size})")]


def _shape_gather(c: Constructor) -> list[str]:  # the index's shape
    return [_set_shape(c, "(= s1 (shape i1))", "s1")]


def _shape_index_select(c: Constructor) -> list[str]:  # x's shape, the axis as long as the 1-d index
    return [_set_shape(c, _shape_inputs(c), f"(vec-set s0 a_axis {_get('s1', 0)})")]


def _shape_topk(c: Constructor) -> list[str]:  # x's shape, the axis k long
    return [_set_shape(c, _shape_inputs(c), "(vec-set s0 a_axis a_k)")]


def _shape_concat(c: Constructor) -> list[str]:
    total = _sum([_get(f"s{k}", "a_axis") for k in range(c.n_inputs)])
    return [_set_shape(c, _shape_inputs(c), f"(vec-set s0 a_axis {total})")]


def _spatial(c: Constructor) -> int:
    return int(c.op.meta["spatial"])


def _window(size: str, kernel: str, stride: str, pad: str, dil: str, ceil: bool) -> str:
    span = f"(- (- (+ {size} (* 2 {pad})) (* {dil} (- {kernel} 1))) 1)"
    if not ceil:
        return f"(+ (/ {span} {stride}) 1)"
    out = f"(+ (/ (+ {span} (- {stride} 1)) {stride}) 1)"
    # drop the last window when it would start past the input (+ padding), as torch does
    late = f"(min 1 (max 0 (+ (- (* (- {out} 1) {stride}) (+ {size} {pad})) 1)))"
    return f"(- {out} {late})"


def _shape_conv(c: Constructor) -> list[str]:
    n = _spatial(c)
    dims = [
        _window(_get("s0", 2 + i), _get("s1", 2 + i), _get("a_stride", i), _get("a_padding", i),
                _get("a_dilation", i), False)
        for i in range(n)
    ]
    return [_set_shape(c, _shape_inputs(c), _vec([_get("s0", 0), _get("s1", 0), *dims]))]


def _shape_conv_transpose(c: Constructor) -> list[str]:
    n = _spatial(c)
    dims = []
    for i in range(n):
        size, k = _get("s0", 2 + i), _get("s1", 2 + i)
        s, p, op, d = (_get(f"a_{a}", i) for a in ("stride", "padding", "output_padding", "dilation"))
        dims.append(f"(+ (+ (- (* (- {size} 1) {s}) (* 2 {p})) (* {d} (- {k} 1))) (+ {op} 1))")
    return [_set_shape(c, _shape_inputs(c), _vec([_get("s0", 0), f"(* {_get('s1', 1)} a_groups)", *dims]))]


def _shape_pool(c: Constructor) -> list[str]:
    n = _spatial(c)
    rules = []
    for ceil in (False, True):
        dims = [
            _window(_get("s0", 2 + i), _get("a_kernel_size", i), _get("a_stride", i), _get("a_padding", i),
                    _get("a_dilation", i) if "dilation" in c.attr_names else "1", ceil)
            for i in range(n)
        ]
        rules.append(_set_shape(c, "(= s0 (shape i0))", _vec([_get("s0", 0), _get("s0", 1), *dims]),
                                a_ceil_mode="true" if ceil else "false"))
    return rules


def _shape_input(c: Constructor) -> list[str]:
    return _dim_entries(c, "a_shape") + [
        _set_shape(c, f"(= (vec-length a_shape) {r}) {_dvals('a_shape', r)}", _vec([f"v{i}" for i in range(r)]))
        for r in range(MAX_RANK + 1)
    ]


def _shape_scalar(c: Constructor) -> list[str]:
    return [_set_shape(c, "", "(vec-empty)")]


SHAPE_FAMILIES = {
    "same": _shape_same, "broadcast": _shape_broadcast, "reduce": _shape_reduce, "matmul": _shape_matmul,
    "transpose": _shape_transpose, "reshape": _shape_reshape, "expand_dims": _shape_expand_dims,
    "squeeze": _shape_squeeze, "slice": _shape_slice, "concat": _shape_concat, "conv": _shape_conv,
    "gather": _shape_gather, "index_select": _shape_index_select, "topk": _shape_topk,
    "conv_transpose": _shape_conv_transpose, "pool": _shape_pool, "input": _shape_input, "scalar": _shape_scalar,
}

# Flops of one e-node, as an egglog i64 expression (elementwise work counts one per output element).
_FLOPS = {
    "same": "no", "broadcast": "no", "reduce": "n0", "matmul": f"(* (* 2 no) {_get('s0', '(- (vec-length s0) 1)')})",
    "conv": f"(* (* 2 no) (/ n1 {_get('s1', 0)}))", "conv_transpose": f"(* (* 2 n0) (/ n1 {_get('s1', 0)}))",
    "pool": "n0", "concat": "0", "slice": "0", "transpose": "0", "gather": "0", "index_select": "0",
    "topk": "n0",
}


def _bcast_rules() -> list[str]:
    rules = []
    for ra in range(MAX_RANK + 1):
        for rb in range(MAX_RANK + 1):
            r = max(ra, rb)
            items = []
            for i in range(r):
                ia, ib = i - (r - ra), i - (r - rb)
                if ia < 0:
                    items.append(_get("b", ib))
                elif ib < 0:
                    items.append(_get("a", ia))
                else:  # valid broadcasting: equal, or one of them is 1
                    items.append(f"(max {_get('a', ia)} {_get('b', ib)})")
            rules.append(f"(rule ((need-bcast a b) (= (vec-length a) {ra}) (= (vec-length b) {rb})) "
                         f"((set (bcast a b) {_vec(items)})) :ruleset {ANALYSIS})")
    return rules


def _dtype_rules(c: Constructor) -> list[str]:
    pat = c.pattern()
    if "dtype" in c.attr_names:
        return [f"(rule ((= t {pat})) ((set (dtype t) a_dtype)) :ruleset {ANALYSIS})"]
    if c.op.dtype is O.boolean:  # comparisons and logic
        return [f'(rule ((= t {pat})) ((set (dtype t) "bool")) :ruleset {ANALYSIS})']
    if c.op.dtype is O.index_result:  # argmax / argmin
        return [f'(rule ((= t {pat})) ((set (dtype t) "int64")) :ruleset {ANALYSIS})']
    promoted = [1, 2] if c.op.name == "where" else [0] if O.shape_family(c.op) in ("gather", "index_select") \
        else list(range(c.n_inputs))  # not a condition or an index
    query = [f"(= d{k} (dtype i{k}))" for k in promoted]
    value = f"d{promoted[0]}"
    for k in promoted[1:]:  # function values can only be read in the query
        query.append(f"(= p{k} (promote {value} d{k}))")
        value = f"p{k}"
    if c.op.dtype is O.floating:  # an integer or bool result becomes fp32 (exp of an integer tensor)
        query.append(f"(= f (floating {value}))")
        value = "f"
    elif c.op.dtype is O.promoted:  # arithmetic on booleans is int64
        query.append(f"(= f (arith {value}))")
        value = "f"
    elif c.op.dtype is O.summed:  # a sum (or product) of integers or booleans is int64
        query.append(f"(= f (summed {value}))")
        value = "f"
    return [f"(rule ((= t {pat}) {' '.join(query)}) ((set (dtype t) {value})) :ruleset {ANALYSIS})"]


def _cost_rules(c: Constructor, flops_per_byte: int) -> list[str]:
    family = O.shape_family(c.op)
    key = f"(cost_{c.name} {' '.join(c.pattern()[1:-1].split()[1:])})"
    if c.op.meta.get("view") or family in ("input", "scalar"):  # views move no data; cost 1 keeps costs positive
        return [f"(rule ((= t {c.pattern()})) ((set {key} 1)) :ruleset {ANALYSIS})"]
    query = ["(= so (shape t)) (= no (numel so)) (= do (dtype t)) (= zo (itemsize do))"]
    moved = ["(* no zo)"]
    for k in range(c.n_inputs):
        query.append(f"(= s{k} (shape i{k})) (= n{k} (numel s{k})) (= d{k} (dtype i{k})) (= z{k} (itemsize d{k}))")
        moved.append(f"(* n{k} z{k})")
    flops = _FLOPS[family]
    value = f"(+ 1 (+ {_sum(moved)} (/ {flops} {flops_per_byte})))"
    return [f"(rule ((= t {c.pattern()}) {' '.join(query)}) ((set {key} {value})) :ruleset {ANALYSIS})"]


def cost_function(c: Constructor) -> str:
    return f"cost_{c.name}"


def made_relation(c: Constructor) -> str:
    """Provenance: (made_T_op args... "rule") records which rule created an e-node."""
    return f"made_{c.name}"


@cache
def prelude() -> str:
    """Sorts and the analyses shared by all constructors (dims, numel, broadcasting, dtype tables)."""
    lines = [
        "(datatype Dim (DLit i64) (DVar String) (DAdd Dim Dim) (DMul Dim Dim) (DDiv Dim Dim))",
        "(sort DVec (Vec Dim))",
        "(sort IVec (Vec i64))",
        "(datatype T)",
        "(datatype Root)",
        f"(ruleset {ANALYSIS})",
        "(function dval (Dim) i64 :no-merge)",
        "(function gval (Dim) i64 :no-merge)",
        "(function dget (DVec i64) i64 :no-merge)",  # entry k of a dim vector, bound (``_dim_entries``)
        "(function gget (DVec i64) i64 :no-merge)",  # the same, generic
        "(function shape (T) IVec :no-merge)",
        "(function gshape (T) IVec :no-merge)",
        "(function dtype (T) String :no-merge)",
        "(function numel (IVec) i64 :no-merge)",
        "(function bcast (IVec IVec) IVec :no-merge)",
        "(relation need-bcast (IVec IVec))",
        "(function promote (String String) String :no-merge)",
        "(function itemsize (String) i64 :no-merge)",
        "(function floating (String) String :no-merge)",
        "(function summed (String) String :no-merge)",
        "(function arith (String) String :no-merge)",
        f"(rule ((= d (DLit n))) ((set (dval d) n)) :ruleset {ANALYSIS})",
        f"(rule ((= d (DAdd a b)) (= x (dval a)) (= y (dval b))) ((set (dval d) (+ x y))) :ruleset {ANALYSIS})",
        f"(rule ((= d (DMul a b)) (= x (dval a)) (= y (dval b))) ((set (dval d) (* x y))) :ruleset {ANALYSIS})",
        f"(rule ((= d (DDiv a b)) (= x (dval a)) (= y (dval b))) ((set (dval d) (/ x y))) :ruleset {ANALYSIS})",
    ]
    lines += [generic(r) for r in lines[-4:]]
    for r in range(MAX_RANK + 1):
        lines.append(f"(rule ((= s (shape t)) (= (vec-length s) {r})) "
                     f"((set (numel s) {_product([_get('s', i) for i in range(r)])})) :ruleset {ANALYSIS})")
    for a in DTYPES.values():
        lines.append(f'(set (itemsize "{a.name}") {a.itemsize})')
        lines.append(f'(set (floating "{a.name}") "{a.name if a.is_float else "fp32"}")')
        lines.append(f'(set (summed "{a.name}") "{a.name if a.is_float else "int64"}")')
        lines.append(f'(set (arith "{a.name}") "{"int64" if a.kind == "bool" else a.name}")')
        for b in DTYPES.values():
            lines.append(f'(set (promote "{a.name}" "{b.name}") "{promote(a, b).name}")')
    lines += _bcast_rules()
    lines += [root_declaration(n) for n in range(1, MAX_VARIADIC + 1)]
    return "\n".join(lines)


def root_declaration(n: int) -> str:
    """The constructor of the root over a program's ``n`` outputs (``root__n``). The prelude declares it for 1 to
    MAX_VARIADIC outputs; a program with more declares its own on entry (``convert.to_egglog``): the root is no
    tensor op (no rule, analysis or cost reads it), so its width is only the number of outputs."""
    return f"(constructor root__{n} ({' '.join(['T'] * n)}) Root)"


def generic(rule: str) -> str:
    """A shape rule over bound sizes rewritten over generic sizes: ``shape`` -> ``gshape``, ``dval`` -> ``gval``,
    ``dget`` -> ``gget``."""
    return rule.replace("(shape ", "(gshape ").replace("(dval ", "(gval ").replace("(dget ", "(gget ")


@cache
def constructor_block(name: str, flops_per_byte: int) -> str:
    """One constructor with its cost table, provenance relation and analysis rules."""
    c = constructor_by_name()[name]
    lines = [
        f"(constructor {c.name} ({' '.join(c.sorts())}) T)",
        f"(function {cost_function(c)} ({' '.join(c.sorts())}) i64 :no-merge)",
        f"(relation {made_relation(c)} ({' '.join(c.sorts())} String))",
    ]
    shape_rules = SHAPE_FAMILIES[O.shape_family(c.op)](c)
    lines += shape_rules + [generic(r) for r in shape_rules]
    lines += _dtype_rules(c)
    lines += _cost_rules(c, flops_per_byte)
    return "\n".join(lines)


def declarations(flops_per_byte: int, names: list[str] | None = None) -> str:
    """The prelude plus the blocks of the given constructors (default: all of them)."""
    chosen = names if names is not None else [c.name for c in constructors()]
    return "\n".join([prelude(), *(constructor_block(n, flops_per_byte) for n in chosen)])
