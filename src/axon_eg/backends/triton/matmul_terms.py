"""The left operand of a fused matmul as a sum of ``coef * base`` terms: expression trees over index
tokens (``rm``, ``rn``, ``rk``, ``rkb``, batch ``b0..``), their linear combinations, and the shared constants of
the matmul lowering (``matmul.py`` builds kernels from them)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from axon_eg.ir import ops as O

from .tl_expressions import REDUCTIONS

Index = tuple[str, ...]
Tree = tuple  # ("one",) ("c", float) ("v", node, index) ("acc", name) ("add"|"mul"|"div", a, b) ("neg", a)
ONE: Tree = ("one",)
_TOKEN = re.compile(r"\b(rkb|rk|rm|rn|b\d+)\b")
_TILE = ("rm", "rn", "rk", "rkb")
_SHAPE = {"rm": "BLOCK_M", "rn": "BLOCK_N", "rk": "BLOCK_K", "rkb": "BLOCK_K"}
_VIEWS = O.flat_views()
_FILL = {name: fill for name, (fill, _) in REDUCTIONS.items()}
_FN = {name: fn for name, (_, fn) in REDUCTIONS.items()}
_TL = {"bf16": "tl.bfloat16", "fp16": "tl.float16", "fp32": "tl.float32"}


def _tokens(idx: Index | str) -> frozenset[str]:
    return frozenset(t for s in ((idx,) if isinstance(idx, str) else idx) for t in _TOKEN.findall(s))


def _combine(op: str, acc: str, part: str) -> str:
    return {"max": f"tl.maximum({acc}, {part})", "min": f"tl.minimum({acc}, {part})"}.get(op, f"{acc} + {part}")


# -- terms: the left operand as sum(coef * base) ---------------------------------------------------
def _add(a: Tree, b: Tree) -> Tree:
    if a[0] == b[0] == "c":
        return ("c", a[1] + b[1])
    return _mul(("c", 2.0), a) if a == b else ("add", a, b)


def _mul(a: Tree, b: Tree) -> Tree:
    if a == ONE or b == ONE:
        return b if a == ONE else a
    if a[0] == b[0] == "c":
        return ("c", a[1] * b[1])
    if a[0] == "neg" or b[0] == "neg":
        return _mul(a[1], b[1]) if a[0] == b[0] else _neg(_mul(a[1] if a[0] == "neg" else a, b[1] if b[0] == "neg" else b))
    return ("mul", *sorted((a, b), key=repr))  # canonical, so x*y and y*x share an accumulator


def _neg(a: Tree) -> Tree:
    return ("c", -1.0) if a == ONE else ("c", -a[1]) if a[0] == "c" else a[1] if a[0] == "neg" else ("neg", a)


def _sum(terms: list[Tree]) -> Tree:
    out = terms[0]
    for t in terms[1:]:
        out = _add(out, t)
    return out


Lin = dict  # base tree -> coefficient tree


def _lin_add(a: Lin, b: Lin, negate: bool = False) -> Lin:
    out = dict(a)
    for base, c in b.items():
        c = _neg(c) if negate else c
        out[base] = _add(out[base], c) if base in out else c
    return out


def _lin_mul(a: Lin, b: Lin) -> Lin:
    out: Lin = {}
    for ba, ca in a.items():
        for bb, cb in b.items():
            base, c = _mul(ba, bb), _mul(ca, cb)
            out[base] = _add(out[base], c) if base in out else c
    return out


def _subst(t: Tree, old: str, new: str) -> Tree:
    if t[0] == "v":
        return ("v", t[1], tuple(re.sub(rf"\b{old}\b", new, s) for s in t[2]))
    return (t[0], *(_subst(x, old, new) if isinstance(x, tuple) else x for x in t[1:]))


def _leaves(t: Tree) -> list[Tree]:
    if t[0] == "v":
        return [t]
    return [leaf for x in t[1:] if isinstance(x, tuple) for leaf in _leaves(x)]


def _tree_tokens(t: Tree) -> frozenset[str]:
    if t[0] == "v":
        return _tokens(t[2])
    return frozenset().union(*(_tree_tokens(x) for x in t[1:] if isinstance(x, tuple)))


class _NeedPrepass(Exception):
    """These K statistics are needed inside the K loop: compute them in a pre-pass and start again."""

    def __init__(self, reductions: set[int]):
        super().__init__(sorted(reductions))
        self.reductions = frozenset(reductions)


@dataclass
class _Ctx:
    tag: str  # variable prefix
    tokens: frozenset[str]  # index tokens defined where its lines run
    loop: bool  # inside a K loop: deferred statistics are not known yet
    lines: list[str] = field(default_factory=list)
    memo: dict = field(default_factory=dict)
