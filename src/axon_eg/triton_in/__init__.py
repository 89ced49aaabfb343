"""Triton to Triton: an existing Triton program in (``ax.optimize_triton``, ``axon-eg optimize-triton``),
its stages' candidates through the measurement cascade, the fastest correct one out.

``source`` reads the file (libcst), ``stages`` holds the transformations and the fixed-harness rule,
``run`` builds the bundle, measures and chooses.
"""

from .run import TritonResult, optimize_triton
from .source import TritonInputError, load

__all__ = ["TritonInputError", "TritonResult", "load", "optimize_triton"]
