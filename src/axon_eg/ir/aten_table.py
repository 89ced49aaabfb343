"""THE table of the PyTorch front end, read: aten overload name -> handler. Each handler registers itself where it
is defined (``@handles(...)`` in :mod:`axon_eg.ir.aten_handlers` (element-wise, comparisons, matmul,
reductions, constructors, recurrent cells), :mod:`~axon_eg.ir.aten_layout`, :mod:`~axon_eg.ir.aten_nn`
(softmax, normalizations, attention, convolutions, pooling), :mod:`~axon_eg.ir.aten_losses` and
:mod:`~axon_eg.ir.aten_indexing`, all imported here, so the table is whole wherever this module is
imported); nothing else decides which aten ops :mod:`axon_eg.ir.torch_import` supports. Also here: the ops
whose result may alias their input (for the in-place checks), the data-dependent ops refused with a reason, and
the lookup of an op's handler (an in-place variant ``aten.relu_`` maps to ``aten.relu``).
"""

from __future__ import annotations

from typing import Any

import torch

from axon_eg.ir import (
    aten_indexing,  # noqa: F401 - its handlers register themselves in the table
    aten_losses,  # noqa: F401 - its handlers register themselves in the table
)
from axon_eg.ir.aten_handlers import ATEN, CONTRACTIONS, Handler
from axon_eg.ir.aten_layout import PIECES

SUPPORTED_ATEN_OPS: tuple[str, ...] = tuple(sorted(ATEN))
"""Every aten overload the front end imports (an in-place variant of one is accepted too)."""


def contracts(name: str) -> int:
    """How many contractions the aten op (overload name) imports as: a matmul, attention or convolution is one,
    a recurrent cell two (its input's and its hidden state's linears), anything else none (the ops whose ISA
    choices and tilings multiply a program's candidates; the dynamo partition caps them per region). Each
    handler says so where it registers (``@handles(..., contractions=n)``)."""
    return CONTRACTIONS.get(name, 0)


# Ops whose result may alias their input: an in-place op must not write through (or into) one of them.
VIEW_LIKE = frozenset({
    "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.t.default",
    "aten.transpose.int", "aten.permute.default", "aten.numpy_T.default", "aten.expand.default",
    "aten.expand_as.default", "aten.unsqueeze.default", "aten.squeeze.default", "aten.squeeze.dim",
    "aten.squeeze.dims", "aten.slice.Tensor", "aten.select.int", "aten.narrow.default", "aten.flatten.using_ints",
    "aten.unflatten.int",
    "aten.alias.default", "aten.detach.default", "aten.contiguous.default", "aten.to.dtype", "aten.type_as.default",
    "aten.to.dtype_layout", "aten.to.device", "aten.to.other",
    "aten.dropout.default", "aten.broadcast_tensors.default", *PIECES,
})


_ITEM = ("`.item()` (a tensor's value read into Python) is not supported: data-dependent; keep it a tensor "
         "(x / x.max(), not x / x.max().item())")
_SHAPE_FROM_VALUES = "its output's shape depends on tensor values: data-dependent shapes are not supported"
DATA_DEPENDENT = {
    "aten.item.default": _ITEM, "aten._local_scalar_dense.default": _ITEM,
    **{f"aten.{op}": _SHAPE_FROM_VALUES for op in (
        "nonzero.default", "masked_select.default", "unique.default", "_unique2.default", "unique_dim.default",
        "unique_consecutive.default", "repeat_interleave.Tensor")},
}
"""aten ops whose meaning depends on tensor values, with the reason they cannot be imported."""


def aten_name(target: Any) -> str:
    """The aten overload name of an fx node's target (``aten.relu.default``), or the name of another callable."""
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def writes_self(target: Any) -> bool:
    """An in-place aten op that writes its first argument only (``aten.relu_``, ``aten.add_.Tensor``)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    written = [i for i, arg in enumerate(target._schema.arguments) if arg.alias_info and arg.alias_info.is_write]
    return written == [0]


def handler_for(target: Any) -> Handler | None:
    """The handler of an fx node's target: its own, else (an in-place variant) the out-of-place op's; None if
    the table has neither."""
    name = aten_name(target)
    if name in ATEN:
        return ATEN[name]
    if writes_self(target):  # aten.relu_.default -> aten.relu.default
        ns, packet, overload = name.split(".")
        return ATEN.get(f"{ns}.{packet.rstrip('_')}.{overload}")
    return None


def bind_schema(target: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by their schema names (defaults filled in)."""
    out = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        else:
            out[arg.name] = kwargs.get(arg.name, arg.default_value)
    return out

