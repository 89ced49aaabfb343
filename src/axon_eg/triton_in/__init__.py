"""Triton to Triton: an existing Triton program in (``ax.optimize_triton``, ``axon-eg optimize-triton``),
its stages' candidates through the measurement cascade, the fastest correct one out.

``source`` reads the file (libcst), ``spec`` checks a YAML spec and settles the call every candidate gets
(inputs, ``__init__`` arguments, sizes), ``stages`` holds the transformations and the fixed-harness rule,
``proposer`` the protocol for language-model stages (a generate-verify-refine loop, an OpenAI-compatible
adapter), ``run`` builds the bundle, measures and chooses.
"""

from .proposer import OpenAICompatible, Proposer, refine
from .run import TritonResult, combine, finish, optimize_triton, prepare
from .source import TritonInputError, load

__all__ = ["OpenAICompatible", "Proposer", "TritonInputError", "TritonResult", "combine", "finish", "load",
           "optimize_triton", "prepare", "refine"]
