"""The benchmark suite: each program written once with the NumPy-like front end and once in plain PyTorch.

Every entry has symbolic dims (the same name wherever sizes must agree), its H200 benchmark sizes
(bf16; where torch eager and torch.compile were first measured on the H200, the same shapes), tiny
odd sizes for CI, and an independent PyTorch baseline that never calls axon_eg.

It lives in the package because the CLI offers these programs by name (``axon-eg suite``, ``axon-eg
optimize rmsnorm``) and an installed wheel has no ``benchmarks/``; ``benchmarks/suite.py`` is this module
under its old name, for the benchmark scripts and the tests.

    from axon_eg.suite import SUITE, get        # or: from benchmarks.suite import SUITE, get
    entry = get("rmsnorm_matmul")
    program = entry.bound(small=False)           # bound to the H200 sizes
    out = entry.torch_fn(*entry.torch_inputs())  # the baseline on random CPU inputs
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

import axon_eg as ax
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.program import Program

RMS_EPS = 1e-6  # one eps per norm, shared by the program and its baseline
LN_EPS = 1e-5
BN_EPS = 1e-5
MIN_SUB_CONSTANT = 0.5

SQUARE_8K = {"M": 8192, "N": 8192}
CUBE_4K = {"M": 4096, "K": 4096, "N": 4096}
SMALL_MN = {"M": 5, "N": 7}
SMALL_MKN = {"M": 5, "K": 7, "N": 3}


@dataclass(frozen=True)
class SuiteProgram:
    """One benchmark: the axon_eg program, its sizes and its PyTorch baseline."""

    name: str
    program: Program  # symbolic dims, unbound
    sizes: dict[str, int]  # H200 benchmark sizes (bf16)
    small: dict[str, int]  # tiny sizes for CI
    torch_fn: Callable[..., torch.Tensor]  # plain PyTorch, inputs in program.inputs order
    kind: str  # "single" or "multi"
    description: str

    def __hash__(self) -> int:  # the size dicts are not hashable; name and program identify an entry
        return hash((self.name, self.program))

    def bound(self, small: bool = True) -> Program:
        """The program bound to the CI sizes (``small``) or the H200 sizes."""
        return self.program.bind(self.small if small else self.sizes)

    def torch_module(self) -> torch.nn.Module:
        """A module whose ``forward(*inputs)`` is the baseline (for from_torch)."""
        return TorchFnModule(self.torch_fn, self.name)

    def torch_inputs(self, small: bool = True, seed: int = 0, device: str | torch.device = "cpu",
                     dtype: torch.dtype | None = None) -> list[torch.Tensor]:
        """Random inputs (``axon_eg.ir.inputs.random_inputs``) in program order, cast to the program's
        dtypes or to ``dtype``."""
        program = self.bound(small)
        arrays = random_inputs(program, seed)
        return [
            torch.from_numpy(arrays[spec.name]).to(device=device,
                                                   dtype=dtype or getattr(torch, spec.dtype.torch_name))
            for spec in program.inputs
        ]


class TorchFnModule(torch.nn.Module):
    """Wraps a suite baseline as a module (no parameters: every tensor is a forward input)."""

    def __init__(self, fn: Callable[..., torch.Tensor], name: str):
        super().__init__()
        self.fn = fn
        self.suite_name = name

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.fn(*inputs)


_ENTRIES: list[SuiteProgram] = []


def _entry(kind: str, torch_fn: Callable[..., torch.Tensor], sizes: dict[str, int],
           small: dict[str, int], name: str | None = None) -> Callable[[Callable[..., Any]], SuiteProgram]:
    """Decorator: trace the function into a Program named ``name`` (default: the function's name) and add
    it to the suite; the docstring is its description."""

    def wrap(fn: Callable[..., Any]) -> SuiteProgram:
        entry_name = name or fn.__name__
        entry = SuiteProgram(entry_name, ax.program(fn, name=entry_name), dict(sizes), dict(small), torch_fn,
                             kind, " ".join((fn.__doc__ or "").split()))
        _ENTRIES.append(entry)
        return entry

    return wrap


# ================================================================================================
# Single ops
# ================================================================================================
@_entry("single", lambda x: F.silu(x), SQUARE_8K, SMALL_MN)
def silu(x: ax.Tensor["M", "N", ax.bf16]):
    """SiLU x * sigmoid(x)."""
    return ax.silu(x)


@_entry("single", lambda x: F.gelu(x, approximate="tanh"), SQUARE_8K, SMALL_MN)
def gelu(x: ax.Tensor["M", "N", ax.bf16]):
    """GELU, tanh approximation."""
    return ax.gelu(x, approximate="tanh")


@_entry("single", lambda x, y: x + y, SQUARE_8K, SMALL_MN)
def add(x: ax.Tensor["M", "N", ax.bf16], y: ax.Tensor["M", "N", ax.bf16]):
    """Element-wise x + y, no broadcasting."""
    return x + y


@_entry("single", lambda x: torch.softmax(x, dim=-1), SQUARE_8K, SMALL_MN)
def softmax(x: ax.Tensor["M", "N", ax.bf16]):
    """Row softmax over the last axis."""
    return ax.softmax(x, axis=-1)


@_entry("single", lambda x: torch.log_softmax(x, dim=-1), SQUARE_8K, SMALL_MN)
def log_softmax(x: ax.Tensor["M", "N", ax.bf16]):
    """Row log-softmax over the last axis."""
    return ax.log_softmax(x, axis=-1)


def _rmsnorm_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w


@_entry("single", _rmsnorm_torch, SQUARE_8K, SMALL_MN)
def rmsnorm(x: ax.Tensor["M", "N", ax.bf16], w: ax.Tensor["N", ax.bf16]):
    """RMSNorm over the last axis with a weight (eps 1e-6)."""
    return ax.rmsnorm(x, w, eps=RMS_EPS)


@_entry("single", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, eps=LN_EPS), SQUARE_8K, SMALL_MN)
def layernorm(x: ax.Tensor["M", "N", ax.bf16], w: ax.Tensor["N", ax.bf16], b: ax.Tensor["N", ax.bf16]):
    """LayerNorm over the last axis with weight and bias (eps 1e-5)."""
    return ax.layernorm(x, w, b, eps=LN_EPS)


@_entry("single", lambda x: torch.cumsum(x, dim=-1), {"M": 4096, "N": 4096}, SMALL_MN)
def cumsum(x: ax.Tensor["M", "N", ax.bf16]):
    """Inclusive prefix sum along the last axis."""
    return x.cumsum(axis=-1)


def _rope_torch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


@_entry("single", _rope_torch, {"B": 4, "H": 32, "S": 2048, "D": 128}, {"B": 2, "H": 3, "S": 5, "D": 6})
def rope(x: ax.Tensor["B", "H", "S", "D", ax.bf16], cos: ax.Tensor["S", "D", ax.bf16],
         sin: ax.Tensor["S", "D", ax.bf16]):
    """Rotary embedding x*cos + rotate_half(x)*sin, cos/sin shared by batch and heads."""
    return ax.rope(x, cos, sin)


@_entry("single", lambda x: x.t().contiguous(), SQUARE_8K, SMALL_MN)
def transpose(x: ax.Tensor["M", "N", ax.bf16]):
    """Materialized 2-D transpose."""
    return x.T


@_entry("single", lambda x: x.sum(dim=-1), SQUARE_8K, SMALL_MN, name="sum")
def row_sum(x: ax.Tensor["M", "N", ax.bf16]):
    """Row sum over the last axis."""
    return x.sum(axis=-1)


@_entry("single", lambda x, w: x @ w, CUBE_4K, SMALL_MKN)
def matmul(x: ax.Tensor["M", "K", ax.bf16], w: ax.Tensor["K", "N", ax.bf16]):
    """Plain GEMM x @ w."""
    return x @ w


# ================================================================================================
# Multi-op programs
# ================================================================================================
@_entry("multi", lambda x, w: x.t() @ w, CUBE_4K, SMALL_MKN)
def transpose_matmul(x: ax.Tensor["K", "M", ax.bf16], w: ax.Tensor["K", "N", ax.bf16]):
    """x.T @ w: the transpose should fold into the GEMM's operand layout."""
    return x.T @ w


@_entry("multi", lambda x, g, w: _rmsnorm_torch(x, g) @ w, CUBE_4K, SMALL_MKN)
def rmsnorm_matmul(x: ax.Tensor["M", "K", ax.bf16], g: ax.Tensor["K", ax.bf16], w: ax.Tensor["K", "N", ax.bf16]):
    """RMSNorm (eps 1e-6) feeding a GEMM: the row scale can move past the matmul."""
    return ax.rmsnorm(x, g, eps=RMS_EPS) @ w


@_entry("multi", lambda x, g, b, w: F.layer_norm(x, x.shape[-1:], g, b, eps=LN_EPS) @ w, CUBE_4K, SMALL_MKN)
def layernorm_matmul(x: ax.Tensor["M", "K", ax.bf16], g: ax.Tensor["K", ax.bf16], b: ax.Tensor["K", ax.bf16],
                     w: ax.Tensor["K", "N", ax.bf16]):
    """LayerNorm (eps 1e-5) with weight and bias feeding a GEMM."""
    return ax.layernorm(x, g, b, eps=LN_EPS) @ w


@_entry("multi", lambda x, w, b: F.gelu(x @ w + b), CUBE_4K, SMALL_MKN)
def matmul_bias_gelu(x: ax.Tensor["M", "K", ax.bf16], w: ax.Tensor["K", "N", ax.bf16], b: ax.Tensor["N", ax.bf16]):
    """GEMM epilogue: + row bias, then exact (erf) GELU."""
    return ax.gelu(x @ w + b)


@_entry("multi", lambda x, wg, wu, wd: (F.silu(x @ wg) * (x @ wu)) @ wd, {"M": 2048, "D": 4096, "F": 11008},
        {"M": 5, "D": 7, "F": 9})
def gated_mlp(x: ax.Tensor["M", "D", ax.bf16], wg: ax.Tensor["D", "F", ax.bf16], wu: ax.Tensor["D", "F", ax.bf16],
              wd: ax.Tensor["F", "D", ax.bf16]):
    """SwiGLU MLP silu(x @ Wg) * (x @ Wu) @ Wd."""
    return (ax.silu(x @ wg) * (x @ wu)) @ wd


@_entry("multi", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        {"B": 4, "Hkv": 8, "G": 4, "S": 2048}, {"B": 2, "Hkv": 3, "G": 2, "S": 5})
def gqa(q: ax.Tensor["B", "Hkv*G", "S", 128, ax.bf16], k: ax.Tensor["B", "Hkv", "S", 128, ax.bf16],
        v: ax.Tensor["B", "Hkv", "S", 128, ax.bf16]):
    """Grouped-query attention, non-causal, head dim 128: Hkv*G query heads share Hkv key/value heads."""
    return ax.sdpa(q, k, v)


@_entry("multi", lambda x, w: (x @ w).sum(dim=-1), CUBE_4K, SMALL_MKN)
def sum_matmul(x: ax.Tensor["M", "K", ax.bf16], w: ax.Tensor["K", "N", ax.bf16]):
    """sum(x @ W, -1): the reduction can move into W, turning the GEMM into a GEMV."""
    return (x @ w).sum(axis=-1)


@_entry("multi", lambda x, w, b: F.linear(x, w, b).min(dim=-1, keepdim=True).values - MIN_SUB_CONSTANT,
        CUBE_4K, SMALL_MKN)
def linear_min_sub(x: ax.Tensor["M", "K", ax.bf16], w: ax.Tensor["N", "K", ax.bf16], b: ax.Tensor["N", ax.bf16]):
    """KernelBench style: linear (torch weight layout), min over the last axis (keepdims), minus 0.5."""
    return ax.linear(x, w, b).min(axis=-1, keepdims=True) - MIN_SUB_CONSTANT


def _linear_batchnorm_torch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mean: torch.Tensor,
                            var: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    return F.batch_norm(F.linear(x, w, b), mean, var, gamma, beta, training=False, eps=BN_EPS)


@_entry("multi", _linear_batchnorm_torch, CUBE_4K, SMALL_MKN)
def linear_batchnorm(x: ax.Tensor["M", "K", ax.bf16], w: ax.Tensor["N", "K", ax.bf16], b: ax.Tensor["N", ax.bf16],
                     mean: ax.Tensor["N", ax.bf16], var: ax.Tensor["N", ax.bf16], gamma: ax.Tensor["N", ax.bf16],
                     beta: ax.Tensor["N", ax.bf16]):
    """Linear then inference batch norm (running statistics, eps 1e-5): foldable into the weights."""
    return ax.batchnorm(ax.linear(x, w, b), mean, var, gamma, beta, eps=BN_EPS)


@_entry("multi", lambda x, w, a, b: x @ w + (x @ a) @ b, {**CUBE_4K, "R": 16}, {**SMALL_MKN, "R": 3})
def lora(x: ax.Tensor["M", "K", ax.bf16], w: ax.Tensor["K", "N", ax.bf16], a: ax.Tensor["K", "R", ax.bf16],
         b: ax.Tensor["R", "N", ax.bf16]):
    """LoRA x @ W + (x @ A) @ B with rank R."""
    return x @ w + (x @ a) @ b


@_entry("multi", lambda x, r, w: _rmsnorm_torch(x + r, w), SQUARE_8K, SMALL_MN)
def residual_rmsnorm(x: ax.Tensor["M", "N", ax.bf16], r: ax.Tensor["M", "N", ax.bf16], w: ax.Tensor["N", ax.bf16]):
    """Residual add then RMSNorm with a weight (eps 1e-6)."""
    return ax.rmsnorm(x + r, w, eps=RMS_EPS)


@_entry("multi", lambda x, v: torch.softmax(x, dim=-1) @ v, {"M": 8192, "N": 8192, "D": 128},
        {"M": 5, "N": 7, "D": 3})
def softmax_matmul(x: ax.Tensor["M", "N", ax.bf16], v: ax.Tensor["N", "D", ax.bf16]):
    """Row softmax then a skinny GEMM (the second half of attention)."""
    return ax.softmax(x, axis=-1) @ v


@_entry("multi", lambda a, b: F.gelu(a, approximate="tanh") * b, SQUARE_8K, SMALL_MN)
def gelu_mul(a: ax.Tensor["M", "N", ax.bf16], b: ax.Tensor["M", "N", ax.bf16]):
    """GeGLU gate: tanh-GELU(a) * b."""
    return ax.gelu(a, approximate="tanh") * b


SUITE: tuple[SuiteProgram, ...] = tuple(_ENTRIES)
_BY_NAME = {entry.name: entry for entry in SUITE}


class UnknownSuiteProgram(KeyError):
    """A name that is not in the suite (the message lists the names)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def get(name: str) -> SuiteProgram:
    """The suite program called ``name``."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownSuiteProgram(f"no suite program {name!r}; the suite has {', '.join(_BY_NAME)}") from None


__all__ = ["SUITE", "SuiteProgram", "TorchFnModule", "UnknownSuiteProgram", "get"]
