"""The vendor BLAS as an ISA choice of matmul groups (``isa="blas"``): cuBLAS / cuBLASLt through torch.

A matmul group whose kernel the library can be — the matmul, the views feeding its operands (transposes
and broadcasts are strides the library reads in place), and the epilogue cuBLASLt fuses — runs as one
library call writing the group's output buffer: ``torch.mm``, ``torch.addmm`` (a bias or a same-shaped
tensor added, ``alpha`` and ``beta`` from scalar multiplications), ``torch._addmm_activation`` (then a
ReLU or a tanh-GELU), ``torch.matmul`` for batched products (``baddbmm`` when a same-shaped tensor is
added). Leading batch dims of the left operand times a 2-D right operand (a Linear over a 3-D input)
flatten into one 2-D call.

:func:`core` reads a group as such a call (None when it is not one); :func:`split` turns every matmul
group of a fusion plan into prologue groups, a core the library can run and the remaining epilogue
(``Backend.derived_plans``), so the candidate space always holds what a library-GEMM compiler does, with
our own kernels around it and the νGraph's algebra (scales moved past the matmul, folded constants)
applied first. :func:`source` writes the call into the launcher; ``blas+padk`` first copies the operands
with K contiguous and K zero-padded to the library's row alignment (``memory.library_row_alignment``), for
a K whose rows would take the library off its tensor-core path.

fp32 operands follow the precision policy of the candidate: ``ieee`` (torch's default,
``torch.backends.cuda.matmul.allow_tf32`` off) unless the ISA choice carries ``/tf32``; the call sets the
flag for its duration and restores it.
"""

from __future__ import annotations

from dataclasses import dataclass

from axon_eg.backends.torch.lower import expr as torch_expr
from axon_eg.backends.triton.isa import BLAS_PADK, base, tf32
from axon_eg.extract.fusion import MATMUL, FusionPlan, node_kind, regroup
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program

_VIEWS = frozenset(O.views()) | {"transpose"}
_ACTIVATIONS = {"relu": False, "gelu": True}  # torch._addmm_activation's use_gelu (tanh GELU only)


@dataclass(frozen=True)
class Call:
    """One library call: ``out = act(beta * bias + alpha * (a @ b))``."""

    mm: int
    a: int  # the matmul's operand nodes (views inside the group are applied as torch views)
    b: int
    bias: int | None  # the node added to the product (None: nothing added)
    alpha: float
    beta: float
    activation: str | None  # "relu" / "gelu" (tanh)
    out: int  # the node the call writes
    nodes: frozenset[int]  # the matmul, its epilogue chain and the views they read

    flat: bool = True  # one 2-D call (else batched: torch.matmul / torch.baddbmm)

    @property
    def op(self) -> str:
        if not self.flat:
            return "torch.baddbmm" if self.bias is not None or self.alpha != 1.0 else "torch.matmul"
        return "torch._addmm_activation" if self.activation else "torch.addmm" if self.bias is not None or \
            self.alpha != 1.0 else "torch.mm"


def _scalar(program: Program, j: int) -> float | None:
    """The value of a scalar constant (through views), else None."""
    while program.nodes[j].op in _VIEWS:
        j = program.nodes[j].inputs[0]
    node = program.nodes[j]
    if node.is_constant and all(d == 1 for d in program.concrete_shape(j)):
        value = node.attrs["value"]
        return float(value) if isinstance(value, (int, float)) else None
    return None


def _views(program: Program, inside: set[int], j: int) -> tuple[set[int], int] | None:
    """The views of ``inside`` a value is read through, and the node below them (None: a computed value)."""
    seen: set[int] = set()
    while j in inside and program.nodes[j].op in _VIEWS:
        seen.add(j)
        j = program.nodes[j].inputs[0]
    if j in inside:
        return None
    return seen, j


def _flat(program: Program, a: int, b: int) -> bool:
    """Whether the product is one 2-D call: a 2-D right operand (the left's leading dims flatten)."""
    return len(program.concrete_shape(b)) == 2


def chain(program: Program, inside: set[int], mm: int) -> Call | None:
    """The longest library call starting at the matmul ``mm`` using nodes of ``inside`` (None: ``mm``'s
    operands are computed inside, or their dtypes differ)."""
    node = program.nodes[mm]
    if node.kind is not O.OpKind.CONTRACTION:
        return None
    a, b = node.inputs
    va, vb = _views(program, inside, a), _views(program, inside, b)
    if va is None or vb is None:
        return None
    dts = {program.nodes[j].dtype.name for j in (a, b, mm)}
    if len(dts) != 1 or dts.pop() not in ("bf16", "fp16", "fp32"):
        return None
    nodes = {mm} | va[0] | vb[0]
    users = program.users()
    out_shape = tuple(program.concrete_shape(mm))
    flat = _flat(program, a, b)
    batched = not flat and len(out_shape) == 3 and tuple(program.concrete_shape(a))[:1] == out_shape[:1] \
        and tuple(program.concrete_shape(b))[:1] == out_shape[:1]  # baddbmm: one batch dim, no broadcast
    cur, bias, alpha, beta, act = mm, None, 1.0, 1.0, None
    while act is None:
        nxt = [u for u in users[cur] if node_kind(program.nodes[u].op) is not None or u in inside]
        if cur in program.outputs or len(nxt) != 1 or nxt[0] not in inside:
            break
        u = nxt[0]
        un = program.nodes[u]
        if un.dtype != node.dtype or tuple(program.concrete_shape(u)) != out_shape:
            break
        others = [j for j in un.inputs if j != cur]
        if len(others) != 1 and un.op not in _ACTIVATIONS:
            break
        other = others[0] if others else None
        side = _views(program, inside, other) if other is not None else (set(), u)
        if side is None:
            break
        if un.op == "mul" and (s := _scalar(program, other)) is not None and (flat or batched):
            alpha *= s
            beta = beta * s if bias is not None else beta
        elif un.op == "add" and bias is None and (flat or batched) and _scalar(program, other) is None:
            shape = tuple(program.concrete_shape(other))
            if (batched and shape != out_shape) or program.nodes[side[1]].dtype != node.dtype:
                break  # baddbmm adds a tensor of the output's own shape
            if flat and len(out_shape) > 2 and shape != out_shape and any(d != 1 for d in shape[:-1]):
                break  # flattened to one 2-D call: a row bias or the output's own shape
            bias = other
        elif un.op in _ACTIVATIONS and bias is not None and flat and (
                not _ACTIVATIONS[un.op] or un.attrs.get("approximate") == "tanh"):  # use_gelu: the tanh GELU only
            act = un.op
        else:
            break
        nodes |= side[0] | {u}
        cur = u
    return Call(mm, a, b, bias, alpha, beta, act, cur, frozenset(nodes), flat)


def core(plan: FusionPlan, gi: int) -> Call | None:
    """Group ``gi`` as one library call, or None when the library cannot be its whole kernel."""
    group = plan.groups[gi]
    if group.kind != MATMUL:
        return None
    program = plan.program
    mms = [n for n in group.nodes if program.nodes[n].kind is O.OpKind.CONTRACTION]
    if len(mms) != 1:
        return None
    call = chain(program, set(group.nodes), mms[0])
    if call is None or set(group.nodes) != set(call.nodes) or plan.outputs_of(gi) != [call.out]:
        return None
    return call


def split(plan: FusionPlan) -> FusionPlan | None:
    """The plan with every matmul group split into its prologue (what computes the operands inside the
    group), the library core (:func:`chain`) and the rest of the epilogue; None when nothing changes or a
    split would not be a valid plan (each part convex, the parts acyclic)."""
    program = plan.program
    sets: list[set[int]] = []
    changed = False
    for g in plan.groups:
        inside = set(g.nodes)
        mms = [n for n in g.nodes if program.nodes[n].kind is O.OpKind.CONTRACTION]
        if g.kind != MATMUL or len(mms) != 1:
            sets.append(inside)
            continue
        mm = mms[0]
        ancestors: set[int] = set()
        stack = list(program.nodes[mm].inputs)
        while stack:
            j = stack.pop()
            if j in inside and j not in ancestors:
                ancestors.add(j)
                stack.extend(program.nodes[j].inputs)
        operand_views: set[int] = set()
        for x in program.nodes[mm].inputs:
            while x in inside and program.nodes[x].op in _VIEWS:
                operand_views.add(x)
                x = program.nodes[x].inputs[0]
        prologue = ancestors - operand_views
        call = chain(program, inside - prologue, mm)
        if call is None:  # an operand view over a prologue value: the views go with the prologue
            prologue = ancestors
            call = chain(program, inside - prologue, mm)
        if call is None:
            sets.append(inside)
            continue
        rest = inside - prologue - set(call.nodes)
        parts = [p for p in _components(program, prologue) + [set(call.nodes), rest] if p]
        if len(parts) > 1:
            changed = True
        sets.extend(parts)
    if not changed:
        return None
    return regroup(program, sets)


def _components(program: Program, nodes: set[int]) -> list[set[int]]:
    """The weakly connected parts of a prologue (one per operand it computes), in node order."""
    parts: list[set[int]] = []
    left = set(nodes)
    while left:
        seed = min(left)
        part, stack = set(), [seed]
        while stack:
            j = stack.pop()
            if j in left:
                left.discard(j)
                part.add(j)
                stack.extend(i for i in program.nodes[j].inputs if i in left)
                stack.extend(u for u in left if j in program.nodes[u].inputs)
        parts.append(part)
    return sorted(parts, key=min)


def padded_k(program: Program, call: Call, align: int) -> int:
    """K rounded up so that a row of K elements of the operands' dtype is a multiple of ``align`` bytes."""
    k = program.concrete_shape(call.b)[-2]
    step = max(1, align // program.nodes[call.a].dtype.itemsize)
    return -(-k // step) * step


def source(program: Program, call: Call, expr: dict[int, str], out: str, isa: str | None,
           align: int = 16) -> list[str]:
    """The launcher lines of the call. ``expr`` gives the torch expression of every node the call reads
    from outside (the operands and the bias below their views); ``out`` is the buffer it writes. Under
    ``blas+padk`` both operands are first copied with K contiguous into buffers whose K is zero-padded to
    :func:`padded_k` (the padding adds 0 * 0 terms: the product is the same), so that the library reads
    rows aligned to ``align`` bytes."""
    def value(j: int) -> str:
        if j in expr:
            return expr[j]
        node = program.nodes[j]
        return torch_expr(program, j, [value(i) for i in node.inputs])

    a, b = value(call.a), value(call.b)
    k = program.concrete_shape(call.b)[-2]
    pre: list[str] = []
    if base(isa) == BLAS_PADK:
        kp = padded_k(program, call, align)
        sa, sb = tuple(program.concrete_shape(call.a)), tuple(program.concrete_shape(call.b))
        pa, pb = f"_padk{call.mm}_a", f"_padk{call.mm}_b"
        pre = [f"    {pa} = {a}.new_empty({(*sa[:-1], kp)!r})  # K {k} -> {kp}: rows of {align}-byte multiples",
               f"    {pa}[..., :{k}].copy_({a})",
               f"    {pa}[..., {k}:].zero_()",
               f"    {pb} = {b}.new_empty({(*sb[:-2], sb[-1], kp)!r})  # the right operand with K contiguous",
               f"    {pb}[..., :{k}].copy_({b}.transpose(-1, -2))",
               f"    {pb}[..., {k}:].zero_()"]
        a, b, k = pa, f"{pb}.transpose(-1, -2)", kp
    if call.op == "torch.matmul":
        line = f"torch.matmul({a}, {b}, out={out})"
    else:
        n = program.concrete_shape(call.b)[-1]
        flat = call.flat and len(program.concrete_shape(call.a)) != 2
        if flat:
            a, target = f"{a}.reshape(-1, {k})", f"{out}.view(-1, {n})"
        else:
            target = out
        bias = value(call.bias) if call.bias is not None else target
        if flat and call.bias is not None and len(program.concrete_shape(call.bias)) > 1:
            same = tuple(program.concrete_shape(call.bias)) == tuple(program.concrete_shape(call.out))
            bias = f"{bias}.reshape(-1, {n})" if same else f"{bias}.reshape({n})"  # the output's shape, or a row
        beta = call.beta if call.bias is not None else 0.0
        scal = "" if (beta, call.alpha) == (1.0, 1.0) else f", beta={beta!r}, alpha={call.alpha!r}"
        if call.activation and _ACTIVATIONS[call.activation]:  # use_gelu: CUDA's GELU epilogue (cuBLASLt and
            # its fallback) is tanh, the CPU's erf
            fused = f"torch._addmm_activation({bias}, {a}, {b}{scal}, use_gelu=True, out={target})"
            line = (f"{fused} if {target}.is_cuda else torch._C._nn.gelu_(torch.addmm({bias}, {a}, {b}{scal}, "
                    f"out={target}), approximate='tanh')")
        elif call.activation:
            line = (f"torch._addmm_activation({bias}, {a}, {b}{scal}, "
                    f"use_gelu={_ACTIVATIONS[call.activation]}, out={target})")
        elif call.flat:
            line = f"torch.addmm({bias}, {a}, {b}{scal}, out={target})" if call.op != "torch.mm" else \
                f"torch.mm({a}, {b}, out={target})"
        else:
            line = f"torch.baddbmm({bias}, {a}, {b}{scal}, out={target})"
    if program.nodes[call.mm].dtype.name == "fp32":
        return [*pre, f"    with _fp32_matmul({tf32(isa)}):", f"        {line}"]
    return [*pre, f"    {line}"]


FP32_MATMUL = '''import contextlib


@contextlib.contextmanager
def _fp32_matmul(tf32):
    """fp32 library matmuls at the kernel's precision policy (torch.backends.cuda.matmul.allow_tf32)."""
    flags = torch.backends.cuda.matmul
    saved = flags.allow_tf32
    if saved != tf32:
        flags.allow_tf32 = tf32
    try:
        yield
    finally:
        if saved != tf32:
            flags.allow_tf32 = saved
'''
"""Written into a kernel file that calls the library on fp32 operands."""


LIBRARIES = {"nvidia": "cuBLAS", "intel": "oneDNN"}
"""What ``torch.mm`` runs on each GPU vendor of the hardware files (``HardwareSpec.vendor``)."""


def describe(program: Program, call: Call, isa: str | None, vendor: str = "nvidia", align: int = 16) -> str:
    """The header line of a library group."""
    shape = "x".join(str(d) for d in program.concrete_shape(call.mm))
    k = program.concrete_shape(call.a)[-1]
    extra = [f"K zero-padded to {padded_k(program, call, align)} in copies with K contiguous"
             if base(isa) == BLAS_PADK else "",
             f"bias node {call.bias}" if call.bias is not None else "",
             f"alpha={call.alpha:g}" if call.alpha != 1.0 else "",
             f"beta={call.beta:g}" if call.bias is not None and call.beta != 1.0 else "",
             call.activation or ""]
    dt = program.nodes[call.mm].dtype.name
    prec = f", fp32 {'tf32' if tf32(isa) else 'ieee'}" if dt == "fp32" else ""
    return (f"library GEMM {call.op} ({shape}, K={k}, {dt}{prec})"
            + "".join(f", {e}" for e in extra if e) + f" ({LIBRARIES.get(vendor, 'the vendor BLAS')} through torch)")
