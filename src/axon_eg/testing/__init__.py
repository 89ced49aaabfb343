"""Test helpers shared by every stage: hypothesis strategies for random programs and their inputs."""

from __future__ import annotations

from axon_eg.testing.strategies import (
    DIM_NAMES,
    SKIPPED_OPS,
    SOURCE_OPS,
    DimExpr,
    dim_expressions,
    dims_and_sizes,
    drawn_ops,
    make_inputs,
    program_inputs,
    programs,
    programs_with_inputs,
)

__all__ = ["DIM_NAMES", "SKIPPED_OPS", "SOURCE_OPS", "DimExpr", "dim_expressions", "dims_and_sizes", "drawn_ops",
           "make_inputs", "program_inputs", "programs", "programs_with_inputs"]
