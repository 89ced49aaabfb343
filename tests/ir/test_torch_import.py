"""torch front end: every supported aten op against torch in float64, names, roles, locations and errors."""

from __future__ import annotations

import copy
import logging
import logging.handlers
import random
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.errors import DtypeError, ShapeError, UnsupportedOperation
from axon_eg.ir.dtypes import bf16, fp16, fp32, fp64
from axon_eg.ir.interpret import interpret
from axon_eg.ir.torch_import import SUPPORTED_ATEN_OPS, from_torch, import_torch

aten = torch.ops.aten


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------
class Fn(nn.Module):
    """A tiny module around one function ``fn(module, *inputs)``, with optional parameters and buffers."""

    def __init__(self, fn: Callable, params: dict | None = None, buffers: dict | None = None):
        super().__init__()
        self.fn = fn
        for k, v in (params or {}).items():
            self.register_parameter(k, nn.Parameter(v))
        for k, v in (buffers or {}).items():
            self.register_buffer(k, v)

    def forward(self, *xs):
        return self.fn(self, *xs)


def rand(r: random.Random, *shape: int, positive: bool = False, dtype=torch.float32) -> torch.Tensor:
    """N(0, 1) with no exact zeros, or U(0.5, 2) where the op needs positive values."""
    rng = np.random.default_rng(r.getrandbits(32))
    x = rng.uniform(0.5, 2.0, size=shape) if positive else rng.standard_normal(size=shape)
    x[x == 0.0] = 1.0
    return torch.from_numpy(np.asarray(x)).to(dtype)


def dims(r: random.Random, n: int, lo: int = 1, hi: int = 5) -> list[int]:
    return [r.randint(lo, hi) for _ in range(n)]


def run_both(module: nn.Module, inputs: tuple) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """(interpret(from_torch(module)), module.double()) on the same inputs, both in float64."""
    with torch.no_grad():
        want = copy.deepcopy(module).double()(*[x.double() if x.is_floating_point() else x for x in inputs])
    imported = import_torch(module, inputs)
    users = [s.name for s in imported.program.inputs if s.role == "input"]
    got = interpret(imported.program, {**imported.state, **dict(zip(users, inputs))})
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    return got, tuple(w.detach().numpy() for w in want)


def check(module: nn.Module, inputs: tuple, rtol: float = 1e-7) -> None:
    got, want = run_both(module, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-9)


# ------------------------------------------------------------------------------------------------
# One case per behaviour; together they use every entry of SUPPORTED_ATEN_OPS (checked below)
# ------------------------------------------------------------------------------------------------
Case = Callable[[random.Random], tuple[nn.Module, tuple]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


def one_input(name: str, f: Callable, positive: bool = False) -> None:
    def make(r: random.Random) -> tuple[nn.Module, tuple]:
        return Fn(lambda m, x: f(x)), (rand(r, *dims(r, r.randint(1, 3)), positive=positive),)

    make.__name__ = name
    case(make)


for _name, _f, _pos in [
    ("neg", torch.neg, False), ("exp", torch.exp, False), ("log", torch.log, True), ("sqrt", torch.sqrt, True),
    ("rsqrt", torch.rsqrt, True), ("reciprocal", torch.reciprocal, False), ("abs", torch.abs, False),
    ("square", torch.square, False), ("relu", torch.relu, False), ("sigmoid", torch.sigmoid, False),
    ("tanh", torch.tanh, False), ("silu", F.silu, False), ("mish", F.mish, False), ("hardswish", F.hardswish, False),
    ("hardsigmoid", F.hardsigmoid, False), ("erf", torch.erf, False), ("relu6", F.relu6, False),
    ("gelu_exact", F.gelu, False), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), False),
    ("pow_cube", lambda x: x**3, False), ("pow_fractional", lambda x: x.pow(0.7), True),
    ("pow_scalar_base", lambda x: 1.7**x, False), ("rsub_scalar", lambda x: 2.5 - x, False),
    ("identities", lambda x: x.clone().detach() + aten.alias(x), False),
    ("dropout_eval", lambda x: F.dropout(x, 0.4, training=False), False),
    ("casts", lambda x: x.to(torch.float64).float().type_as(x) + aten._to_copy(x, dtype=torch.float64), False),
    ("scalar_overloads", lambda x: aten.div.Scalar(aten.mul.Scalar(aten.sub.Scalar(aten.add.Scalar(x, 1.5), 0.25),
                                                                   3.0), 2.0), False),
    ("scalar_alpha", lambda x: aten.add.Scalar(x, 1.5, alpha=2) + aten.sub.Scalar(x, 0.5, alpha=3), False),
    ("constants", lambda x: x * torch.tensor(2.0) + torch.tensor([[0.5]]), False),
    ("selu_celu_logsigmoid", lambda x: F.selu(x) + F.celu(x, 0.7) + F.logsigmoid(x * 30), False),
    ("normalize", lambda x: F.normalize(x, dim=-1) + x.norm() + torch.norm(x, p=1, dim=0, keepdim=True).sum()
     + torch.linalg.vector_norm(x, 3.0) + torch.linalg.vector_norm(x, float("inf"))
     + torch.linalg.vector_norm(x, -float("inf")), False),
]:
    one_input(_name, _f, _pos)


@case
def leaky_relu(r):
    slope = r.uniform(0.01, 0.5)
    return Fn(lambda m, x: F.leaky_relu(x, slope)), (rand(r, *dims(r, 2)),)


@case
def softplus(r):
    beta, threshold = r.uniform(0.5, 2.0), r.uniform(0.5, 20.0)
    return Fn(lambda m, x: F.softplus(x * 3, beta, threshold)), (rand(r, *dims(r, 2)),)


@case
def elu(r):
    alpha = r.uniform(0.1, 2.0)
    return Fn(lambda m, x: F.elu(x, alpha)), (rand(r, *dims(r, 2)),)


@case
def clamps(r):
    lo = r.uniform(-1.0, 0.0)
    hi = lo + r.uniform(0.1, 2.0)
    return Fn(lambda m, x: torch.clamp(x, lo, hi) + x.clamp(min=lo) + x.clamp(max=hi) + torch.clamp_min(x, hi)
              + torch.clamp_max(x, lo) + F.hardtanh(x, lo, hi)), (rand(r, *dims(r, 2)),)


@case
def binary_broadcast(r):
    a, b, c = dims(r, 3)
    x, y = rand(r, a, b, c), rand(r, b, 1)
    return Fn(lambda m, x, y: (x + y) * (x - y) / y + torch.add(x, y, alpha=2) - torch.sub(x, y, alpha=0.5)
              + torch.rsub(x, y, alpha=3) + x * 2 - 1 + 3 / y), (x, y)


@case
def maximum_minimum(r):
    a, b = dims(r, 2)
    return Fn(lambda m, x, y: torch.maximum(x, y) + torch.minimum(x, y) + torch.max(x, y) + torch.min(x, y)), (
        rand(r, a, b), rand(r, b))


@case
def matmuls(r):
    b, m, k, n = dims(r, 4)
    return Fn(lambda mod, x, y, z: (torch.mm(x[0], y[0]), torch.bmm(x, y), x @ y[0], torch.matmul(x, z),
                                    torch.matmul(x[:1, None], y[None]))), (
        rand(r, b, m, k), rand(r, b, k, n), rand(r, k, k))


@case
def matmul_vectors(r):
    k, n = dims(r, 2)
    return Fn(lambda m, v, w, y: (torch.matmul(v, w), torch.matmul(v, y), torch.matmul(y.T, v), torch.mv(y.T, v))), (
        rand(r, k), rand(r, k), rand(r, k, n))


@case
def addmm(r):
    m, k, n = dims(r, 3)
    beta, alpha = r.choice([1.0, 0.5]), r.choice([1.0, 2.0])
    return Fn(lambda mod, b, x, y: torch.addmm(b, x, y, beta=beta, alpha=alpha)), (
        rand(r, n), rand(r, m, k), rand(r, k, n))


@case
def linear(r):
    b, s, i, o = dims(r, 4)
    return Fn(lambda m, x: F.linear(x, m.w, m.b) + F.linear(x, m.w), {"w": rand(r, o, i), "b": rand(r, o)}), (
        rand(r, b, s, i),)


@case
def layout(r):
    a, b, c = dims(r, 3, 2, 4)
    perm = r.sample(range(3), 3)
    return Fn(lambda m, x: (x.transpose(0, 2).permute(perm).reshape(-1).view(c, a * b).t().contiguous()
                            .flatten().unflatten(0, (a, b * c)).T.unsqueeze(1).expand(b * c, 2, a)
                            .sum(1)) + x[0, 0].expand_as(x).sum()), (rand(r, a, b, c),)


@case
def unsafe_view(r):
    a, b = dims(r, 2)
    return Fn(lambda m, x: aten._unsafe_view(x * 2, [b, a])), (rand(r, a, b),)


@case
def squeezes(r):
    a, b = dims(r, 2, 2, 4)
    return Fn(lambda m, x: x.squeeze() + x.squeeze(1).unsqueeze(1).squeeze((0, 1, 3))[None, :, None]
              .squeeze(0) + x.squeeze(0).squeeze(-1)), (rand(r, a, 1, b, 1),)


@case
def slices(r):
    a, b = dims(r, 2, 2, 7)
    i0 = r.randint(0, a - 1)
    j0 = r.randint(0, b - 1)
    j1 = r.randint(j0 + 1, b)
    j0, j1 = (j0 - b if r.random() < 0.5 else j0), (j1 - b if j1 < b and r.random() < 0.5 else j1)
    step = r.randint(1, 3)
    return Fn(lambda m, x: x[i0:, j0:j1:step] + x[i0, j0:j1:step] + x[-1, j0:j1:step] + x[:, j0][i0]), (
        rand(r, a, b),)


@case
def cat(r):
    a, b, c = dims(r, 3)
    axis = r.randint(-2, 1)
    shapes = [(a, b), (c, b)] if axis in (0, -2) else [(a, b), (a, c)]
    return Fn(lambda m, x, y: torch.cat([x, y, x * 2], dim=axis)), tuple(rand(r, *s) for s in shapes)


@case
def stacks(r):  # stack (any dim of the result, negative too) and the *stack forms on 0-d, 1-d and 2-d tensors
    a, b = dims(r, 2)
    axis = r.randint(-3, 2)
    return Fn(lambda m, x, y, v, s: (
        torch.stack([x, y, x * 2], dim=axis), torch.stack([s, s * 2]), torch.hstack([x, y]), torch.hstack([v, v]),
        torch.hstack([s, v]), torch.vstack([x, y]), torch.vstack([v, v * 2]), torch.row_stack([s, s]),
        torch.dstack([x, y]), torch.dstack([v, v]), torch.dstack([s, s]), torch.column_stack([x, y]),
        torch.column_stack([v, v]), torch.column_stack([s, s]))), (
        rand(r, a, b), rand(r, a, b), rand(r, b), rand(r))


@case
def reductions(r):
    shape = dims(r, 3)
    axis = r.randint(-3, 2)
    keep = r.random() < 0.5
    return Fn(lambda m, x: (x.sum() + x.mean() + x.max() + x.min()
                            + (x.sum(axis, keepdim=keep) + x.mean((0, 2), keepdim=keep).sum()
                               + x.amax(axis, keepdim=keep) + x.amin((axis,), keepdim=keep)
                               + x.max(axis, keepdim=keep)[0] + x.min(dim=axis, keepdim=keep).values
                               + torch.logsumexp(x, axis, keepdim=keep)))), (rand(r, *shape),)


@case
def cumsum(r):
    shape, axis = dims(r, 2), r.randint(-2, 1)
    return Fn(lambda m, x: torch.cumsum(x, axis)), (rand(r, *shape),)


@case
def variances(r):
    a, b = dims(r, 2, 2, 5)
    return Fn(lambda m, x: x.var(1) + x.std(1) + x.var(dim=1, correction=0) + torch.std(x, dim=1, correction=0)
              + x.var() + x.std()), (rand(r, a, b),)


@case
def softmaxes(r):
    shape = dims(r, 3)
    axis = r.randint(-3, 2)
    return Fn(lambda m, x: torch.softmax(x, axis) + F.log_softmax(x, axis) + aten._softmax(x, axis, False)
              + aten._log_softmax(x, axis, False)), (rand(r, *shape),)


@case
def layer_norm(r):
    b, s, h = dims(r, 3, 2, 5)
    k = r.randint(1, 2)
    shape = (s, h)[-k:]
    params = {"w": rand(r, *shape), "b": rand(r, *shape)}
    return Fn(lambda m, x: F.layer_norm(x, shape, m.w, m.b, 1e-3) + F.layer_norm(x, shape)
              + F.layer_norm(x, shape, None, m.b), params), (rand(r, b, s, h),)


@case
def rms_norm(r):
    b, h = dims(r, 2, 2, 6)
    return Fn(lambda m, x: F.rms_norm(x, (h,), m.w, eps=1e-5) + F.rms_norm(x, (h,), eps=1e-3),
              {"w": rand(r, h)}), (rand(r, b, h),)


@case
def group_norm(r):
    n, g, cpg, s = dims(r, 4, 1, 3)
    c = g * cpg
    return Fn(lambda m, x: F.group_norm(x, g, m.w, m.b, 1e-4) + F.group_norm(x, g)
              + F.group_norm(x, g, None, m.b), {"w": rand(r, c), "b": rand(r, c)}), (rand(r, n, c, s + 1, 2),)


@case
def instance_norm(r):
    n, c, s = dims(r, 3, 2, 4)
    return Fn(lambda m, x: F.instance_norm(x, weight=m.w, bias=m.b, eps=1e-4) + F.instance_norm(
        x, m.rm, m.rv, use_input_stats=False), {"w": rand(r, c), "b": rand(r, c)},
        {"rm": rand(r, c), "rv": rand(r, c, positive=True)}), (rand(r, n, c, s),)


@case
def batch_norm(r):
    n, c, s = dims(r, 3, 2, 4)
    return Fn(lambda m, x: (F.batch_norm(x, m.rm, m.rv, m.w, m.b, False, 0.1, 1e-3)
                            + F.batch_norm(x, None, None, m.w, m.b, True)
                            + F.batch_norm(x, m.rm, m.rv, None, m.b)
                            + aten._native_batch_norm_legit_no_training(x, m.w, m.b, m.rm, m.rv, 0.1, 1e-5)[0]),
              {"w": rand(r, c), "b": rand(r, c)}, {"rm": rand(r, c), "rv": rand(r, c, positive=True)}), (
        rand(r, n, c, s),)


@case
def attention(r):
    b, hkv, g, lq, lk, d = dims(r, 6, 1, 4)
    causal, gqa = r.random() < 0.5, r.random() < 0.5
    scale = r.choice([None, 0.3])
    hq = hkv * g if gqa else hkv
    return Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                                enable_gqa=gqa)), (
        rand(r, b, hq, lq, d), rand(r, b, hkv, lk, d), rand(r, b, hkv, lk, d))


@case
def attention_mask(r):
    b, hkv, g, lq, lk, d = dims(r, 6, 1, 4)
    per_head = r.random() < 0.5
    mask = rand(r, b, hkv * g, lq, lk) if per_head else rand(r, lq, lk)
    if r.random() < 0.5:  # a boolean mask: True attends (each query attends to its first key at least)
        mask = mask > 0
        mask[..., 0] = True
    return Fn(lambda m, q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)), (
        rand(r, b, hkv * g, lq, d), rand(r, b, hkv, lk, d), rand(r, b, hkv, lk, d), mask)


def _conv_case(n: int, transposed: bool, padding_string: bool = False) -> Case:
    def make(r: random.Random) -> tuple[nn.Module, tuple]:
        groups, cin_g, cout_g, batch = dims(r, 4, 1, 2)
        stride, dilation = r.randint(1, 2), r.randint(1, 2)
        kernel = [r.choice([1, 3]) if padding_string else r.randint(1, 3) for _ in range(n)]
        padding = [r.randint(0, (k - 1) * dilation // 2) for k in kernel]
        size = [r.randint(dilation * (k - 1) + 1, dilation * (k - 1) + 3) for k in kernel]
        x = rand(r, batch, groups * cin_g, *size)
        if transposed:
            w = rand(r, groups * cin_g, cout_g, *kernel)
            out_pad = r.randint(0, max(stride, dilation) - 1)
            f = getattr(F, f"conv_transpose{n}d")
            return Fn(lambda m, x: f(x, m.w, m.b, stride, padding, out_pad, groups, dilation)
                      + aten.convolution(x, m.w, None, [stride] * n, padding, [dilation] * n, True, [out_pad] * n,
                                         groups), {"w": w, "b": rand(r, groups * cout_g)}), (x,)
        w = rand(r, groups * cout_g, cin_g, *kernel)
        f = getattr(F, f"conv{n}d")
        if padding_string:
            return Fn(lambda m, x: f(x, m.w, m.b, 1, "same", dilation, groups)
                      + f(x, m.w, None, 1, "valid", 1, groups).sum(), {"w": w, "b": rand(r, groups * cout_g)}), (x,)
        return Fn(lambda m, x: f(x, m.w, m.b, stride, padding, dilation, groups)
                  + aten.convolution(x, m.w, None, [stride] * n, padding, [dilation] * n, False, [0] * n, groups),
                  {"w": w, "b": rand(r, groups * cout_g)}), (x,)

    make.__name__ = f"conv{'_transpose' if transposed else ''}{n}d{'_padding_string' if padding_string else ''}"
    return case(make)


def _pool_case(n: int, kind: str) -> Case:
    def make(r: random.Random) -> tuple[nn.Module, tuple]:
        kernel = [r.randint(1, 3) for _ in range(n)]
        stride = [r.randint(1, 2) for _ in range(n)] if r.random() < 0.7 else None
        padding = [r.randint(0, k // 2) for k in kernel]
        dilation = r.randint(1, 2) if kind == "max" else 1
        size = [dilation * (k - 1) + r.randint(1, 4) for k in kernel]
        ceil = r.random() < 0.3
        x = rand(r, *dims(r, 2, 1, 2), *size)
        if kind == "max":
            f = getattr(F, f"max_pool{n}d")
            return Fn(lambda m, x: f(x, kernel, stride, padding, dilation, ceil)
                      + f(x, kernel, stride, padding, dilation, ceil, return_indices=True)[0]), (x,)
        f = getattr(F, f"avg_pool{n}d")
        include = r.random() < 0.5
        return Fn(lambda m, x: f(x, kernel, stride, padding, ceil, include)), (x,)

    make.__name__ = f"{kind}_pool{n}d"
    return case(make)


def _adaptive_case(n: int) -> Case:
    def make(r: random.Random) -> tuple[nn.Module, tuple]:
        out = [r.randint(1, 3) for _ in range(n)]
        size = [o * r.randint(1, 3) for o in out]
        uneven = [r.randint(1, 6) for _ in range(n)]  # windows of unequal sizes where size % out != 0
        f = getattr(F, f"adaptive_avg_pool{n}d")
        return Fn(lambda m, x: f(x, out) + f(x, 1) + f(x, uneven).sum()), (rand(r, 2, 3, *size),)

    make.__name__ = f"adaptive_avg_pool{n}d"
    return case(make)


for _n in (1, 2, 3):
    _conv_case(_n, False)
    _conv_case(_n, False, padding_string=True)
    _conv_case(_n, True)
    _pool_case(_n, "max")
    _pool_case(_n, "avg")
    _adaptive_case(_n)


@case
def splits(r):
    a, b = dims(r, 2, 1, 4)
    n = r.randint(2, 7)  # chunks of ceil(n / k), the last one shorter or missing

    def f(m, x, y):
        parts = [*x.chunk(r.randint(1, n), dim=1), *torch.split(x, max(1, n // 2), dim=-1),
                 *torch.split(x, [n - 1, 1], dim=1), *torch.tensor_split(x, r.randint(1, n), dim=1),
                 *torch.tensor_split(x, [n // 2], dim=1)]
        x1, y1 = torch.broadcast_tensors(x, y)
        return sum(p.sum(dim=1) for p in parts) + sum(x.unbind(1)) + (x1 * y1).sum(dim=1)

    return Fn(f), (rand(r, a, n), rand(r, 1, n))


def _reduction(r: random.Random) -> str:
    return r.choice(["mean", "sum", "none"])


@case
def regression_losses(r):
    a, b = dims(r, 2)
    red = _reduction(r)
    delta, beta = r.choice([0.3, 1.0, 2.5]), r.choice([0.0, 0.5, 1.0])
    return Fn(lambda m, x, y: F.mse_loss(x, y, reduction=red) + F.l1_loss(x, y, reduction=red)
              + F.huber_loss(x, y, reduction=red, delta=delta) + F.smooth_l1_loss(x, y, reduction=red, beta=beta)), (
        rand(r, a, b), rand(r, a, b))


@case
def distribution_losses(r):
    n, c, s = dims(r, 3)
    red = _reduction(r)
    smoothing = r.choice([0.0, 0.1])

    def f(m, x, t, logits):
        kl = F.kl_div(F.log_softmax(x, 1), F.softmax(t, 1), reduction="batchmean") + F.kl_div(
            x, t, reduction="sum" if red == "mean" else red, log_target=True).sum()
        ce = F.cross_entropy(logits, F.softmax(t, 1), reduction=red, label_smoothing=smoothing, weight=m.w).sum()
        bce = F.binary_cross_entropy_with_logits(x, F.sigmoid(t), reduction=red).sum() + \
            F.binary_cross_entropy_with_logits(x, F.sigmoid(t), weight=m.w.reshape(c, 1), pos_weight=m.p).sum()
        return kl + ce + bce

    return Fn(f, buffers={"w": rand(r, c, positive=True), "p": rand(r, s, positive=True)}), (
        rand(r, n, c, s), rand(r, n, c, s), rand(r, n, c, s))


@case
def embedding_losses(r):
    n, d = dims(r, 2, 1, 6)
    red = _reduction(r)
    swap, p = r.random() < 0.5, r.choice([1.0, 2.0, 3.0])
    return Fn(lambda m, a, b, c: (1 - F.cosine_similarity(a, b, dim=1)).mean() + F.cosine_similarity(
        a, c[:1], dim=-1, eps=1e-3).sum() + F.triplet_margin_loss(a, b, c, margin=0.7, p=p, swap=swap,
                                                                   reduction=red).sum()), (
        rand(r, n, d), rand(r, n, d), rand(r, n, d))


@case
def aliases(r):
    a, b = dims(r, 2)
    lo = r.uniform(-1, 0)
    return Fn(lambda m, x, y: torch.multiply(x, y) - torch.subtract(x, y, alpha=2) + torch.true_divide(x, 3)
              + torch.divide(y, x) * torch.multiply(x, 0.5) - torch.subtract(x, 1.5) + torch.true_divide(y, 2.0)
              + torch.divide(x, 4.0) + torch.negative(torch.absolute(x)) + torch.clip(y, lo, lo + 1)), (
        rand(r, a, b), rand(r, a, b))


@case
def narrow_and_repeat(r):
    a, b, c = dims(r, 3)
    k, start = r.randint(1, 3), r.randint(-b, b - 1)
    length = r.randint(1, b - start % b)
    reps = [r.randint(1, 3) for _ in range(r.randint(3, 4))]
    return Fn(lambda m, x: (x.narrow(1, start, length).repeat_interleave(k, dim=r.choice([0, 1, -1])).sum()
                            + x.repeat_interleave(k).mean() + x.repeat(*reps).sum(0))), (rand(r, a, b, c),)


@case
def triangles_and_diagonals(r):
    a, b, c = dims(r, 3)
    k = r.randint(-3, 3)
    return Fn(lambda m, x, v: torch.tril(x, k) - 2 * torch.triu(x, -k) + torch.triu(x).sum() + torch.diag(v)
              + torch.diag(x[0, 0]).sum()), (rand(r, a, b, c, c), rand(r, c))


def einsum_equation(r: random.Random, n_ops: int) -> tuple[str, list[list[str]], dict[str, int]]:
    """A random einsum equation over up to 5 labels (sizes 1-4): each operand distinct labels in a random
    order, the output a random subset of them (sometimes implicit: no ``->``)."""
    labels = r.sample("abcde", r.randint(1, 5))
    sizes = {c: r.randint(1, 4) for c in labels}
    terms = [r.sample(labels, r.randint(0, min(3, len(labels)))) for _ in range(n_ops)]
    seen = sorted({c for t in terms for c in t})
    out = r.sample(seen, r.randint(0, len(seen)))
    eq = ",".join("".join(t) for t in terms)
    return (eq if r.random() < 0.25 else eq + "->" + "".join(out)), terms, sizes


@case
def einsum(r):
    eq, terms, sizes = einsum_equation(r, r.randint(1, 3))
    return Fn(lambda m, *xs: torch.einsum(eq, *xs)), tuple(rand(r, *(sizes[c] for c in t)) for t in terms)


@case
def masks(r):
    """Comparisons, logic, where / masked_fill, zeros_like / ones_like / full_like and bool casts, with a bool
    mask input."""
    a, b = dims(r, 2)
    t = r.uniform(-0.5, 0.5)

    def f(m, x, mask):
        keep = mask & (x > t) | (x <= -1.0) ^ torch.logical_not(mask)
        y = torch.where(keep, x, 0.0) + torch.where(~mask, 1.5, x) + x.masked_fill(mask, -2.0)
        y = y + torch.where(torch.logical_and(mask, x >= t), x, torch.zeros_like(x)) * torch.ones_like(x)
        y = y + torch.where(torch.logical_or(x < t, mask), torch.full_like(x, 0.5), x) + (x == x).float()
        y = y + (x != t).to(x.dtype) + torch.logical_xor(mask, x > 0).float() + torch.where(x > t, 2.0, -1.0)
        z = x * 0.5 + 0.1
        y = y + (x > z).float() + (x >= z).float() - (x < z).float() - (x <= z).float() + (x == 0.5).float() \
            + (x != z).float() + (x == z).float()
        return y + torch.bitwise_not(mask).float() + (mask | mask).float() + torch.bitwise_and(mask, mask).float() \
            + torch.bitwise_or(mask, x > 0).float() + torch.bitwise_xor(mask, mask).float() \
            + x.masked_fill(mask, torch.tensor(3.0)) + mask.float().sum()

    return Fn(f), (rand(r, a, b), torch.from_numpy(np.random.default_rng(r.getrandbits(32)).random((a, b)) < 0.5))


@case
def indices(r):
    """argmax / argmin (and max / min's indices), gather, take_along_dim, index_select, embedding, nll_loss
    and cross_entropy with class-index targets (weights, ignore_index, label smoothing, each reduction)."""
    n, c, d = r.randint(1, 5), r.randint(2, 6), r.randint(1, 4)
    red = _reduction(r)
    smoothing = r.choice([0.0, 0.1])
    ignore = r.randint(0, c - 1) if r.random() < 0.5 else -100
    rng = np.random.default_rng(r.getrandbits(32))
    target = torch.from_numpy(rng.integers(0, c, (n,)))
    rows = torch.from_numpy(rng.integers(0, c, (2, 3)))

    def f(m, x, t, ix):
        lp = F.log_softmax(x, dim=1)
        loss = F.cross_entropy(x, t, weight=m.w, ignore_index=ignore, reduction=red, label_smoothing=smoothing)
        loss = loss.sum() + F.nll_loss(lp, t, reduction=red).sum() + F.cross_entropy(x, t)
        picks = torch.gather(x, 1, t[:, None]).sum() + torch.take_along_dim(x, t[:, None], 1).sum()
        rows = torch.index_select(m.table, 0, ix[0]).sum() + F.embedding(ix, m.table).sum()
        args = (x.argmax(1) - x.argmin(dim=1, keepdim=True)).float().sum() + x.argmax().float() \
            + x.max(dim=1)[1].float().sum() + x.min(dim=0, keepdim=True)[1].float().sum() + x.argmin(keepdim=True).float().sum()
        return loss + picks + rows + args

    return Fn(f, buffers={"w": rand(r, c, positive=True), "table": rand(r, c, d)}), (rand(r, n, c), target, rows)


@case
def margin_losses(r):
    """hinge embedding, soft margin, margin ranking and cosine embedding losses (targets of 1 and -1; each
    reduction), and binary cross entropy of probabilities (with and without weights)."""
    n, d = r.randint(1, 5), r.randint(1, 6)
    red = _reduction(r)
    rng = np.random.default_rng(r.getrandbits(32))
    signs = torch.from_numpy(rng.choice([-1.0, 1.0], size=(n, d))).float()
    margin = r.choice([0.0, 0.5, 1.0])

    def f(m, x, y, s, p):
        out = F.hinge_embedding_loss(x, s, margin=margin, reduction=red).sum() \
            + F.soft_margin_loss(x, s, reduction=red).sum() \
            + F.margin_ranking_loss(x, y, s, margin=margin, reduction=red).sum() \
            + F.cosine_embedding_loss(x, y, s[:, 0], margin=margin, reduction=red).sum() \
            + F.binary_cross_entropy(torch.sigmoid(x), p, reduction=red).sum() \
            + F.binary_cross_entropy(torch.sigmoid(y), p, weight=p + 0.5)
        return out

    return Fn(f), (rand(r, n, d), rand(r, n, d), signs, rand(r, n, d, positive=True) / 2.5)


@case
def small_forms(r):
    """Constructors (zeros / ones / full and their new_ and _like forms), clamp with tensor bounds, aminmax,
    msort, addcmul / addcdiv, lerp, logaddexp (infinities of the same sign included), sin / cos, and rounding."""
    a, b = dims(r, 2)

    def f(m, x, y):
        made = torch.zeros(a, b) + torch.ones(b) * 2 + torch.full((a, 1), 0.5) + x.new_zeros(a, b) + x.new_ones(1, b) \
            + x.new_full((a, b), -1.5)
        lo, hi = torch.aminmax(x, dim=-1, keepdim=True)
        clamped = torch.clamp(x, min=y * 0.1, max=y + 1) + torch.clamp_min(x, y) + torch.clamp_max(x, y)
        inf = torch.full((a, b), float("-inf"))
        mixed = torch.addcmul(x, x, y, value=0.5) + torch.addcdiv(x, y, y * y + 1, value=2.0) + torch.lerp(x, y, 0.3) \
            + torch.lerp(x, y, torch.sigmoid(y)) + torch.logaddexp(x, y) + torch.logaddexp(inf, inf).exp()
        rounded = torch.floor(x * 3) + torch.ceil(x) + torch.round(x * 2) + torch.trunc(x * 3) + torch.sign(x)
        return made + lo + hi + clamped + mixed + rounded + torch.sin(x) * torch.cos(y) + torch.msort(x)

    return Fn(f), (rand(r, a, b), rand(r, a, b))


@case
def made_in_forward(r):
    """torch.arange in each form (ints and floats: buffers of the program) and F.one_hot (int64) feeding
    float work: positions scaled into angles, a class mask."""
    n, c = r.randint(1, 6), r.randint(1, 5)
    rng = np.random.default_rng(r.getrandbits(32))
    labels = torch.from_numpy(rng.integers(0, c, (n,)))

    def f(m, x, t):
        # in x's dtype, so that torch's float64 run computes in float64 too (arange's default is fp32)
        pos = torch.arange(n).to(x.dtype)[:, None] * torch.arange(0.5, c, 1.0, dtype=x.dtype)[None, :c] \
            + torch.arange(1, 2 * c + 1, 2)
        return x * torch.sin(pos) + F.one_hot(t, c).float() * 2.0 + aten.arange.start(1, c + 1).to(x.dtype) / 3

    return Fn(f), (rand(r, n, c), labels)


@case
def sorting(r):
    """sort (values and indices, both orders; a stable order), argsort, topk (largest and smallest), on any axis;
    take_along_dim without dim (the flattened tensors)."""
    a, b = dims(r, 2, 1, 6)
    axis = r.choice([0, 1, -1])
    k = r.randint(1, (a, b)[axis])
    desc, largest = r.random() < 0.5, r.random() < 0.5

    def f(m, x):
        values, order = torch.sort(x, dim=axis, descending=desc)
        top, where = torch.topk(x, k, dim=axis, largest=largest)
        flat = torch.take_along_dim(x, torch.argsort(x, dim=axis, descending=not desc))
        return (values * 2 + order.float(), top.sum() + where.float().sum(),
                flat + torch.argsort(x, descending=True, stable=True).float().sum()
                + aten.sort.stable(x, stable=True, dim=axis)[1].float().sum())

    return Fn(f), (rand(r, a, b),)


@case
def bits(r):
    """&, |, ^, ~, <<, >> on integer tensors (a boolean or a Python int operand promoted), and on booleans
    the logical ops."""
    n = r.randint(1, 6)
    rng = np.random.default_rng(r.getrandbits(32))
    x = torch.from_numpy(rng.integers(-50, 50, (n,)))
    y = torch.from_numpy(rng.integers(0, 7, (n,))).to(torch.int32)

    def f(m, x, y, z):
        mask = z > 0
        ints = (x & y) + (x | 5) + (x ^ y) + ~x + (x << y) + (x >> 2) + torch.bitwise_left_shift(x, 1) \
            + torch.bitwise_right_shift(x, y) + (x & mask) + torch.bitwise_xor(x, 3) + aten.__and__.Scalar(x, 6) \
            + aten.__lshift__.Scalar(x, 2) + aten.__rshift__.Tensor(x, y) + aten.__xor__.Scalar(x, 9) \
            + aten.bitwise_and.Scalar(x, 12) + aten.bitwise_left_shift.Tensor(x, y) + aten.bitwise_or.Scalar(x, 3) \
            + aten.bitwise_right_shift.Tensor_Scalar(x, 1)
        return ints, (mask & (z < 1)) | ~mask ^ (z > 0.5)

    return Fn(f), (x, y, rand(r, n))


@case
def flips_and_reverse_scans(r):
    a, b, c = dims(r, 3)
    axes = tuple(sorted(r.sample(range(3), r.randint(1, 3))))
    along = r.randint(0, 2)
    return Fn(lambda m, x: torch.flip(x, axes) + x.flip(-1).cumsum(-1).flip(-1) + torch.fliplr(x[0])[None]
              + torch.flipud(x[:, 0])[:, None] + torch.cumprod(x, along)
              + x.flip(1).cumprod(1).flip(1)), (rand(r, a, b, c),)


@case
def pads_and_exclusive_scans(r):
    """F.pad in each mode (negative amounts crop) and the exclusive scans written with it."""
    a, b, c = r.randint(1, 4), r.randint(2, 5), r.randint(3, 6)
    mode = r.choice(["constant", "replicate", "reflect", "circular"])
    left, right = r.randint(0, 2), r.randint(-1 if mode == "constant" else 0, 2)  # torch crops in constant mode
    v = r.uniform(-1, 1)

    def f(m, x):
        y = F.pad(x, (left, right, 1, 0), mode=mode) if mode != "constant" else F.pad(x, (left, right, 1, 0), value=v)
        exclusive = F.pad(x, (1, 0))[..., :-1].cumsum(-1) + torch.constant_pad_nd(x, (0, 0, 0, 1), 0.5)[:, :-1]
        return y.sum() + exclusive

    return Fn(f), (rand(r, a, b, c),)


@case
def inplace(r):
    a, b = dims(r, 2)

    def f(m, x, y):
        z = x * 2
        z.add_(y)
        z.relu_()
        w = F.hardtanh(z - 1, -0.5, 0.5, inplace=True)
        w.mul_(3)
        return z + w, w

    return Fn(f), (rand(r, a, b), rand(r, b))


@case
def advanced_indexing(r):
    """x[i] with integer tensors (negative entries too, int64 and int32): one axis, adjacent axes (the broadcast
    block in their place), axes apart (the block in front), aten._unsafe_index; a 1-d table at a 2-d index."""
    a, b, c = dims(r, 3)
    p, q = dims(r, 2)
    rng = np.random.default_rng(r.getrandbits(32))
    i = torch.from_numpy(rng.integers(-a, a, (p, q)))
    j = torch.from_numpy(rng.integers(-c, c, (q,))).to(torch.int32)
    k = torch.from_numpy(rng.integers(0, b, (p, 1)))

    def f(m, x, i, j, k):
        return (x[i], x[:, k], x[i, :, j], x[:, k, j], aten._unsafe_index(x, [None, k]),
                m.table[k] * 2 + x[i[:, :1], k].sum())

    return Fn(f, buffers={"table": rand(r, b)}), (rand(r, a, b, c), i, j, k)


@case
def roll_and_diff(r):
    """torch.roll over some axes and over the flattened tensor; torch.diff of order 1 or 2 along any axis, with
    prepend and append pieces, and of booleans."""
    a, b, c = r.randint(1, 4), r.randint(1, 5), r.randint(3, 6)
    shifts = [r.randint(-7, 7) for _ in range(2)]
    n, dim = r.randint(1, 2), r.choice([-1, 2])

    def f(m, x, y):
        rolled = torch.roll(x, shifts, (0, -1)) + torch.roll(x, shifts[0]) + x.roll(shifts[1], 1)
        return (rolled, torch.diff(x, n=n, dim=dim, prepend=y[..., :1], append=y),
                torch.diff(x, dim=1 if b > 1 else 2).sum(), torch.diff(x > 0))

    return Fn(f), (rand(r, a, b, c), rand(r, a, b, c))


_MODES = {1: ["nearest", "nearest-exact", "linear"], 2: ["nearest", "nearest-exact", "bilinear", "bicubic", "bilinear-aa",
                                                         "bicubic-aa"], 3: ["nearest", "nearest-exact", "trilinear"]}


@case
def interpolate(r):
    """F.interpolate in every mode over 1, 2 and 3 spatial axes, each to a size or by scale factors (up, down,
    fractional), align_corners either way."""
    shapes = [dims(r, 2 + n) for n in (1, 2, 3)]
    calls = []
    for n, shape in zip((1, 2, 3), shapes):
        for mode in _MODES[n]:
            least = [1] * (n - 1) + [2 if mode.endswith("-aa") else 1]  # antialiased to width 1: refused
            if r.random() < 0.5:
                how = {"size": [r.randint(lo, 7) for lo in least]}
            else:
                scales = [r.choice([0.5, 0.75, 1.0, 1.5, 2.0, 3.0]) for _ in range(n)]
                how = {"scale_factor": [s if int(d * s) >= lo else 2.0 for d, s, lo in zip(shape[2:], scales, least)]}
            if mode.endswith("-aa"):
                how["antialias"] = True
            if "linear" in mode or "cubic" in mode:
                how["align_corners"] = r.random() < 0.5
            calls.append((n, mode.removesuffix("-aa"), how))

    def f(m, *xs):
        return tuple(F.interpolate(xs[n - 1], mode=mode, **how) for n, mode, how in calls)

    return Fn(f), tuple(rand(r, *shape) for shape in shapes)


@case
def upsample_overloads(r):
    """Each upsampling op's sized overload (what decompositions and hand-written calls give), with and without
    scales."""
    a, b, d, h, w = dims(r, 5)
    o = dims(r, 3)
    s = r.choice([None, 1.5])
    corners = r.random() < 0.5
    wide = [o[1], max(o[2], 2)]  # antialiased to width 1: refused

    def f(m, x1, x2, x3):
        up2 = (aten.upsample_nearest2d.default(x2, o[1:], s, None) + aten._upsample_nearest_exact2d.default(x2, o[1:])
               + aten.upsample_bilinear2d.default(x2, o[1:], corners, None, s)
               + aten.upsample_bicubic2d.default(x2, o[1:], corners, s, s)
               + aten._upsample_bilinear2d_aa.default(x2, wide, corners) + aten._upsample_bicubic2d_aa.default(x2, wide, corners))
        up1 = aten.upsample_nearest1d.default(x1, o[:1], s) + aten._upsample_nearest_exact1d.default(x1, o[:1], s) \
            + aten.upsample_linear1d.default(x1, o[:1], corners, s)
        up3 = aten.upsample_nearest3d.default(x3, o, None, s, None) + aten._upsample_nearest_exact3d.default(x3, o) \
            + aten.upsample_trilinear3d.default(x3, o, corners, s, None, s)
        return up1, up2, up3

    return Fn(f), (rand(r, a, b, w), rand(r, a, b, h, w), rand(r, a, b, d, h, w))


@case
def recurrent_cells(r):
    """nn.LSTMCell, nn.GRUCell and nn.RNNCell (tanh and relu), with and without biases, batched or not."""
    n, i, h = dims(r, 3)
    bias = r.random() < 0.7
    batch = (n,) if r.random() < 0.7 else ()
    cells = nn.ModuleList([nn.LSTMCell(i, h, bias), nn.GRUCell(i, h, bias), nn.RNNCell(i, h, bias),
                           nn.RNNCell(i, h, bias, nonlinearity="relu")])

    def f(m, x, hx, cx):
        h1, c1 = m.cells[0](x, (hx, cx))
        return h1, c1, m.cells[1](x, hx), m.cells[2](x, hx) + m.cells[3](x, h1)

    module = Fn(f)
    module.cells = cells
    return module, (rand(r, *batch, i), rand(r, *batch, h), rand(r, *batch, h))


@case
def device_moves(r):
    """.to(device), .to(device, dtype), .to(dtype=, device=) and .to(other): casts or nothing."""
    a, b = dims(r, 2)
    return Fn(lambda m, x, y: x.to("cpu") + x.to("cpu", torch.float64) + x.to(device=x.device, dtype=torch.float64)
              + aten.to.other(x, y) + aten.to.dtype_layout(x, dtype=torch.float64)), (
        rand(r, a, b), torch.ones(1, dtype=torch.float64))


# ------------------------------------------------------------------------------------------------
# The tests
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=max(2, settings.default.max_examples // 8))
@given(r=st.randoms(use_true_random=False))
def test_case_matches_torch_float64(name, r):
    module, inputs = CASES[name](r)
    check(module, inputs)


def test_every_supported_aten_op_has_a_case():
    seen = set()
    for make in CASES.values():
        module, inputs = make(random.Random(0))
        graph = torch.export.export(module, inputs).graph
        seen |= {str(n.target) for n in graph.nodes if n.op == "call_function"}
    missing = sorted(set(SUPPORTED_ATEN_OPS) - seen)
    assert not missing, f"SUPPORTED_ATEN_OPS entries without a test case: {missing}"


def test_supported_ops_are_sorted_aten_names():
    assert list(SUPPORTED_ATEN_OPS) == sorted(SUPPORTED_ATEN_OPS)
    assert all(name.startswith("aten.") and name.count(".") == 2 for name in SUPPORTED_ATEN_OPS)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 4)
        self.norm = nn.BatchNorm1d(4).eval()
        self.unused = nn.Linear(3, 3)
        self.register_buffer("offset", torch.full((4,), 0.5))

    def forward(self, tokens, gate):
        y = self.norm(self.linear(tokens))
        return torch.sigmoid(gate) * y + self.offset, y.sum(1)


def test_names_roles_shapes_and_unused_state():
    block = Block().eval()
    with torch.no_grad():
        block.norm.running_var.uniform_(0.5, 2.0)
        block.norm.running_mean.normal_()
    inputs = (rand(random.Random(1), 3, 6), rand(random.Random(2), 3, 4))
    program = from_torch(block, inputs)
    specs = {s.name: s for s in program.inputs}
    assert [s.name for s in program.inputs][:2] == ["tokens", "gate"]
    assert specs["tokens"].shape == (3, 6) and specs["tokens"].role == "input" and specs["tokens"].dtype == fp32
    assert specs["linear.weight"].role == "parameter" and specs["linear.weight"].shape == (4, 6)
    assert specs["norm.running_var"].role == "buffer" and specs["offset"].role == "buffer"
    assert not any(name.startswith("unused.") or "num_batches" in name for name in specs)
    assert program.name == "Block" and program.free_dims == set()
    assert program.output_shapes() == [(3, 4), (3,)]
    check(block, inputs)


class HandsOnAParameter(nn.Module):
    """Returns one of its parameters as it is, beside a computed output, and holds a buffer no op reads."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(5, 3))
        self.register_buffer("unused_stat", torch.ones(3))

    def forward(self, x):
        return x * 2.0, self.table  # no op reads the table


def test_a_parameter_that_is_an_output_is_kept_when_unused_state_is_dropped():
    module = HandsOnAParameter().eval()
    inputs = (rand(random.Random(4), 2, 3),)
    program = from_torch(module, inputs)
    names = [s.name for s in program.inputs]
    assert "table" in names and "unused_stat" not in names
    check(module, inputs)


def test_training_batch_norm_uses_batch_statistics_and_drops_running_stats():
    module = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4))
    inputs = (rand(random.Random(3), 6, 5),)
    program = from_torch(module, inputs)
    assert not any("running" in s.name for s in program.inputs)
    check(module, inputs)


class TanhTwice(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2  # the line every node comes from


def test_locations_point_at_user_lines():
    # torch.export records the innermost forward() frame of the user's modules (not helper functions)
    line = TanhTwice.forward.__code__.co_firstlineno + 1
    program = from_torch(TanhTwice(), (torch.randn(2, 3),))
    ops = [i for i, n in enumerate(program.nodes) if n.op not in ("input", "constant")]
    assert ops and all(program.location(i).endswith(f"test_torch_import.py:{line}") for i in ops)


class Cummax(nn.Module):
    def forward(self, x):
        return torch.cummax(x, dim=-1)[0] + x


CUMMAX_LINE = Cummax.forward.__code__.co_firstlineno + 1


def test_unsupported_op_names_the_op_and_the_line():
    with pytest.raises(UnsupportedOperation) as info:
        from_torch(Cummax(), (torch.randn(2, 3),))
    message = str(info.value)
    assert "aten.cummax" in message and f"test_torch_import.py:{CUMMAX_LINE}" in message
    assert info.value.op == "aten.cummax.default"
    assert info.value.location.endswith(f"test_torch_import.py:{CUMMAX_LINE}")


@pytest.mark.parametrize("fn, op", [
    (lambda m, x: torch.kthvalue(x, 2, dim=1)[0], "aten.kthvalue"),
    (lambda m, x: torch.median(x, dim=1)[0], "aten.median"),
    (lambda m, x: x.scatter_add(1, x.argmax(1, keepdim=True), x), "aten.scatter_add"),
    (lambda m, x: (x.float() & 3), "aten.__and__.Scalar"),
])
def test_other_unsupported_ops(fn, op):
    with pytest.raises(UnsupportedOperation, match=op.replace(".", r"\.") + r".*test_torch_import\.py:\d+"):
        from_torch(Fn(fn), (torch.randn(3, 4),))


def test_the_indices_of_max_dim_are_its_argmax():
    program = from_torch(Fn(lambda m, x: x.max(dim=1)[1]), (torch.randn(3, 4),))
    assert [n.op for n in program.nodes][-1] == "argmax" and program.nodes[program.outputs[0]].dtype.name == "int64"


@pytest.mark.parametrize("fn, why", [
    (lambda m, x: F.dropout(x, 0.5, training=True), "random"),
    (lambda m, x: F.conv2d(x, m.w, padding="same"), "unevenly"),
    (lambda m, x: F.adaptive_avg_pool2d(x, (300, 1)), "uneven windows, more than 256"),
    (lambda m, x: torch.diag(x[0, 0], 1), r"aten\.diag.*only the main diagonal"),
    (lambda m, x: torch.topk(x.sum(), 1)[0], r"aten\.topk.*0-d tensor"),
    (lambda m, x: torch.einsum("ii->i", x[0, 0]), r"aten\.einsum.*repeated within one operand"),
    (lambda m, x: torch.tensor_split(x, [4], dim=2)[1].sum(), r"aten\.tensor_split\.indices.*output 1 is empty"),
    (lambda m, x: F.cross_entropy(x.flatten(1), m.w.flatten().long()), "class-index targets"),
])
def test_unsupported_variants_say_why(fn, why):
    with pytest.raises(UnsupportedOperation, match=why):
        from_torch(Fn(fn, {"w": torch.ones(2, 1, 2, 2)}), (torch.randn(1, 1, 4, 4),))


def test_inplace_write_through_a_view_is_refused():
    def f(m, x):
        y = x * 2
        v = y.view(-1)
        y.relu_()
        return v

    with pytest.raises(UnsupportedOperation, match=r"aten\.relu_.*view"):
        from_torch(Fn(f), (torch.randn(3, 4),))


def test_inplace_on_a_view_whose_base_is_dead_is_fine():
    def f(m, x):
        v = (x * 2).view(-1)
        v.relu_()
        return v + 1

    check(Fn(f), (torch.randn(3, 4),))


class Scale(nn.Module):
    def forward(self, x, idx):
        return x * idx.float()


def test_an_input_of_another_dtype_is_a_clear_dtype_error():
    with pytest.raises(DtypeError, match=r"'idx'.*torch\.uint8.*bf16, fp16, fp32, fp64, int32, int64 and bool"):
        from_torch(Scale(), (torch.randn(3), torch.arange(3).to(torch.uint8)))


def test_integer_and_boolean_inputs_import():
    program = from_torch(Scale(), (torch.randn(3), torch.arange(3)))
    assert [s.dtype.name for s in program.inputs] == ["fp32", "int64"]


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x


class ItemDivide(nn.Module):
    def forward(self, x):
        s = x.max().item()
        return x / s


class Mismatch(nn.Module):
    def forward(self, x, y):
        return x + y


def test_data_dependent_control_flow_is_one_line_naming_it_and_the_line(capfd):
    line = Branchy.forward.__code__.co_firstlineno + 1
    with pytest.raises(UnsupportedOperation) as info:
        from_torch(Branchy(), (torch.randn(3),))
    message = str(info.value)
    assert message.startswith("Branchy: data-dependent control flow is not supported: forward() at ")
    assert f"test_torch_import.py:{line} (`if x.sum() > 0:`)" in message and "\n" not in message
    assert info.value.location.endswith(f"test_torch_import.py:{line}")
    assert capfd.readouterr().err == ""  # torch.export's logs and prints were kept out of the terminal


def test_python_item_is_named_as_data_dependent():
    line = ItemDivide.forward.__code__.co_firstlineno + 1
    with pytest.raises(UnsupportedOperation, match=rf"aten\.item\.default at .*test_torch_import\.py:{line}: "
                                                   r"`\.item\(\)` .* is not supported: data-dependent"):
        from_torch(ItemDivide(), (torch.randn(3),))


def test_shape_mismatch_at_export_is_one_line_naming_the_line(capfd):
    line = Mismatch.forward.__code__.co_firstlineno + 1
    with pytest.raises(ShapeError) as info:
        from_torch(Mismatch(), (torch.randn(2, 3), torch.randn(4, 5)))
    message = str(info.value)
    assert message.startswith(f"Mismatch: forward() at {__file__}:{line} (`return x + y`): ")
    assert "broadcast" in message and "\n" not in message
    assert capfd.readouterr().err == ""


class AddsInPlace(nn.Module):
    def forward(self, x, y):
        x.add_(1)
        return x * y


class WritesASlice(nn.Module):
    def forward(self, x):
        x[0] = 0.0
        return x + 1


class ScalesItsWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3), requires_grad=False)

    def forward(self, x):
        self.weight.mul_(2)
        return x * self.weight


@pytest.mark.parametrize("module, inputs, what, op", [
    (AddsInPlace(), (torch.randn(3), torch.randn(3)), "its input 'x'", r"aten\.add_\.Tensor"),
    (WritesASlice(), (torch.randn(2, 3),), "its input 'x'", r"aten\.(copy_|fill_)\.\w+"),
    (Fn(lambda m, x: F.relu(x, inplace=True) * 2), (torch.randn(3),), "its input 'xs_0'", r"aten\.relu_\.default"),
    (ScalesItsWeight(), (torch.randn(3),), "its parameter 'weight'", r"aten\.mul_\.Tensor"),
])
def test_writing_an_input_in_place_is_refused_naming_it(module, inputs, what, op):
    with pytest.raises(UnsupportedOperation, match=rf"forward\(\) writes {what} in place \({op} at "
                                                   r".*test_torch_import\.py:\d+\), which is not supported"):
        from_torch(module, inputs)


def test_writing_a_fresh_tensor_or_a_buffer_in_place_is_fine():
    check(Fn(lambda m, x: (x * 2).add_(1).relu_()), (torch.randn(3, 4),))
    module = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))  # training: num_batches_tracked.add_(1)
    program = from_torch(module, (torch.randn(5, 4),))
    assert [s.name for s in program.inputs if s.role == "input"] == ["input"]


def test_a_functionalized_graph_records_the_mutation_and_is_refused_too():
    ep = torch.export.export(AddsInPlace(), (torch.randn(3), torch.randn(3))).run_decompositions({})
    assert ep.graph_signature.user_inputs_to_mutate
    with pytest.raises(UnsupportedOperation, match=r"writes its input 'x' in place"):
        import_torch(ep, (torch.randn(3), torch.randn(3)), name="functional")


def test_an_export_failure_without_a_user_line_shows_torchs_output(monkeypatch):
    namespace: dict = {}
    exec(compile("import logging\n"  # a failure raised from a file that is no user's
                 "def export(module, args):\n"
                 "    logging.getLogger('torch.export').warning('what torch said')\n"
                 "    raise RuntimeError('something torch-internal\\nsecond line')\n", "<torch internals>", "exec"), namespace)
    monkeypatch.setattr(torch.export, "export", namespace["export"])
    seen = logging.handlers.BufferingHandler(10)
    logger = logging.getLogger("torch.export")
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, seen])
    with pytest.raises(UnsupportedOperation, match=r"^Fn: torch.export could not trace forward\(\): something "
                                                   "torch-internal$"):
        from_torch(Fn(lambda m, x: x), (torch.randn(3),))
    assert [r.getMessage() for r in seen.buffer] == ["what torch said"]  # replayed to torch's own handlers


@pytest.mark.parametrize("dtype, want", [(torch.bfloat16, bf16), (torch.float16, fp16), (torch.float64, fp64)])
def test_low_precision_dtypes(dtype, want):
    module = nn.Sequential(nn.Linear(8, 4), nn.GELU(), nn.LayerNorm(4)).to(dtype)
    x = rand(random.Random(4), 3, 8, dtype=dtype)
    program = from_torch(module, (x,))
    assert {s.dtype for s in program.inputs} == {want}
    assert program.nodes[program.outputs[0]].dtype == want
    check(module, (x,))


def test_mixed_dtype_promotion_and_cast():
    program = from_torch(Fn(lambda m, x, y: (x + y).to(torch.bfloat16)),
                         (torch.randn(3, dtype=torch.bfloat16), torch.randn(3)))
    ops = [n.op for n in program.nodes]
    assert program.nodes[program.outputs[0]].dtype == bf16 and "cast" in ops


def test_python_number_inputs_are_specialized():
    program = from_torch(Fn(lambda m, x, k: x * k), (torch.randn(2, 3), 3))
    assert [s.name for s in program.inputs] == ["xs_0"]
    np.testing.assert_allclose(interpret(program, [np.ones((2, 3))]), np.full((2, 3), 3.0))


def test_exported_program_and_decomposed_graphs():
    module = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU(inplace=True)).eval()
    with torch.no_grad():
        module[1].running_var.uniform_(0.5, 2.0)
    x = rand(random.Random(5), 2, 2, 5, 5)
    ep = torch.export.export(module, (x,)).run_decompositions({})
    ops = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "aten._native_batch_norm_legit_no_training.default" in ops
    imported = import_torch(ep, (x,), name="decomposed")
    assert imported.program.name == "decomposed"
    got = interpret(imported.program, {**imported.state, "input": x})
    with torch.no_grad():
        want = copy.deepcopy(module).double()(x.double())
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-7, atol=1e-9)
