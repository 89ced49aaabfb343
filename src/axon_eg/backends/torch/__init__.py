"""PyTorch backend: Programs as plain PyTorch source (eager and torch.compile baselines, float64 reference).

    from axon_eg.backends.torch import emit_module
    text = emit_module(program)   # defines eager(*inputs), compiled(*inputs), reference(*arrays)
"""

from axon_eg.backends.torch.lower import LOWERINGS, emit_function, emit_module, expr, missing_lowerings

__all__ = ["LOWERINGS", "emit_function", "emit_module", "expr", "missing_lowerings"]
