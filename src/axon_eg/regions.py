"""What a selected region is at run time, shared by the dynamo backend (:mod:`axon_eg.dynamo`) and the saved
file (:mod:`axon_eg.model_new`): ``RegionKernel``, the kernel standing in for a region's submodule, and
``drop_asserts`` and ``views_as_reshapes``, the graph clean-ups both apply to an exported graph.
"""

from __future__ import annotations

from typing import Any

import torch


class RegionKernel(torch.nn.Module):
    """A region's selected kernel standing in for its submodule: same arguments, same outputs. ``where``
    gives each output of the region: ``("out", k)`` the kernel's k-th output, ``("in", k)`` the region's k-th
    argument itself (an output that is an input, e.g. a ``.float()`` of a float tensor: never copied)."""

    def __init__(self, best: Any, single: bool, where: list[tuple[str, int]] | None = None, extras: tuple = ()):
        super().__init__()
        self.best, self.single, self.where = best, single, where
        self.extras = extras  # (position, values, dtype): inputs the importer made (``_made_inputs``)
        self._made: dict[torch.device, list[torch.Tensor]] = {}

    def forward(self, *args: Any) -> Any:
        outs = self.computed(*args)
        if self.where is not None:
            outs = [outs[k] if kind == "out" else args[k] for kind, k in self.where]
        return outs[0] if self.single else tuple(outs)

    def computed(self, *args: Any) -> list[torch.Tensor]:
        """The kernel's outputs (new tensors, none an input: what the region computes) for the region's
        arguments: called with contiguous inputs and the importer's made ones inserted."""
        call = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        if self.extras:
            device = next(a.device for a in args if isinstance(a, torch.Tensor))
            made = self._made.get(device)
            if made is None:
                made = self._made[device] = [torch.tensor(v, dtype=d, device=device) for _, v, d in self.extras]
            for (pos, _, _), t in zip(self.extras, made):
                call.insert(pos, t)
        out = self.best(*call)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def output_specs(self) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """Each computed output's shape and dtype (the program's outputs): what the custom op's fake gives."""
        program = self.best.program
        return [(tuple(program.concrete_shape(o)), getattr(torch, program.nodes[o].dtype.torch_name))
                for o in program.outputs]


def drop_asserts(graph: torch.fx.Graph) -> None:
    """Export's metadata assertions (``aten._assert_tensor_metadata`` after a dtype conversion: checks of
    what the version's signature already fixes, no value) removed: each reads a value, which would make the
    region computing it write it out for nothing."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten._assert_tensor_metadata.default \
                and not node.users:
            graph.erase_node(node)


VIEWS_THAT_NEED_STRIDES = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


def views_as_reshapes(graph: torch.fx.Graph) -> None:
    """Every ``aten.view`` (and ``_unsafe_view``) of a functional graph made an ``aten.reshape``. A view
    relies on its input's strides as the export saw them: ``attn.permute(2, 0, 1, 3).contiguous().view(...)``
    exports without the ``contiguous`` (a no-op there, since SDPA wrote its output in that order), and a
    region's kernel, or Inductor's code for it, writes the value row-major instead, where the view then fails.
    ``reshape`` is the view wherever the strides allow it and a copy elsewhere; in a graph without in-place
    ops (``dynamo.functional``) no write can tell a view's alias from the copy."""
    for node in graph.nodes:
        if node.op == "call_function" and node.target in VIEWS_THAT_NEED_STRIDES:
            node.target = torch.ops.aten.reshape.default
