"""Parameters shared with the reference: a Triton-to-Triton input's ``Model`` builds its own weights (Xe-Forge's
inputs draw them with ``torch.randn`` in fp16, store a Linear's weight transposed for their GEMM kernel), the
reference ``Model`` its own, so the two would compute with different weights and every candidate would be judged
wrong. Before anything runs, the input's tensors (parameters and buffers) are matched to the reference's:

1. by name (``fc.weight`` to ``fc.weight``, the same shape);
2. the rest by shape, in order (the i-th unmatched input tensor of a shape to the i-th unmatched reference tensor
   of that shape), or, for a 2-D tensor with no such partner, by the transposed shape (a weight kept ``[in, out]``);

and the harness's entry copies the reference's values into the input's, cast to the input's dtypes (the entry's
``_axon_eg_share``). Refused, naming both sides: an input tensor no reference tensor fits, a shape whose unmatched
tensors are not as many on both sides (which goes with which is then a guess)."""

from __future__ import annotations

from collections.abc import Sequence

from .source import TritonInputError

State = Sequence[tuple[str, tuple[int, ...]]]
"""A module's parameters and buffers: (name, shape), in ``named_parameters()`` then ``named_buffers()`` order."""


def state_of(module) -> list[tuple[str, tuple[int, ...]]]:
    """A module's parameters and buffers as :data:`State` (a module on the meta device will do)."""
    named = list(module.named_parameters()) + list(module.named_buffers())
    return [(name, tuple(t.shape)) for name, t in named]


def share(mine: State, theirs: State, input_name: str = "the input", reference_name: str = "the reference") \
        -> list[tuple[str, str, bool]]:
    """(the input's tensor, the reference's tensor, transposed) for every input tensor: see the module docstring.
    TritonInputError naming both sides where the match would be a guess or no tensor fits."""
    pairs: list[tuple[str, str, bool]] = []
    ref_shape = dict(theirs)
    taken: set[str] = set()
    rest = []
    for name, shape in mine:
        if ref_shape.get(name) == shape and name not in taken:
            pairs.append((name, name, False))
            taken.add(name)
        else:
            rest.append((name, shape))
    left = [(n, s) for n, s in theirs if n not in taken]
    for transposed in (False, True):
        unmatched = []
        by_shape: dict[tuple[int, ...], list[str]] = {}
        for n, s in left:
            by_shape.setdefault(s, []).append(n)
        wanted: dict[tuple[int, ...], list[str]] = {}
        for name, shape in rest:
            key = shape[::-1] if transposed else shape
            if transposed and len(shape) != 2:
                unmatched.append((name, shape))
                continue
            wanted.setdefault(key, []).append(name)
        for key, names in wanted.items():
            partners = by_shape.get(key, [])
            if not partners:
                unmatched += [(n, key[::-1] if transposed else key) for n in names]
                continue
            if len(partners) != len(names):
                raise TritonInputError(
                    f"parameters: {input_name}'s {', '.join(names)} and {reference_name}'s {', '.join(partners)} "
                    f"share the shape {list(key)}{' transposed' if transposed else ''} but are not as many on both "
                    "sides: which goes with which is a guess (name them alike)")
            for a, b in zip(names, partners):
                pairs.append((a, b, transposed))
                taken.add(b)
        left = [(n, s) for n, s in left if n not in taken]
        rest = unmatched
    if rest:
        name, shape = rest[0]
        others = ", ".join(f"{n} {list(s)}" for n, s in left) or "none left"
        raise TritonInputError(f"parameters: {input_name}'s {name} (shape {list(shape)}) has no tensor of {reference_name} "
                               f"to take its values from (unmatched there: {others})")
    return pairs


__all__ = ["State", "share", "state_of"]
