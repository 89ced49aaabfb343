"""PyTorch backend: Programs as plain PyTorch source (eager and torch.compile baselines, float64 reference).

    from axon_eg.backends.torch import emit_module
    text = emit_module(program)   # defines eager(*inputs), compiled(*inputs), reference(*arrays)
"""

from axon_eg.backends.torch.expressions import LOWERINGS, missing_lowerings
from axon_eg.backends.torch.lower import emit_function, emit_module, expr

__all__ = ["LOWERINGS", "emit_function", "emit_module", "expr", "missing_lowerings"]
