"""Layout groups (transpose, slice, concat with nothing else to compute). Until the tiled transpose
lands they go through the element-wise lowering's index maps (correct, but a transpose there reads
or writes with a stride)."""

from __future__ import annotations

from .elementwise import lower

__all__ = ["lower"]
