"""Models written after the rest of the corpus, before anything was tuned for them (issue 49's "whole models
you have not seen"): a T5 layer (RMSNorm without a mean, a relative position bias added to the scores, softmax
attention written out), a squeeze-excitation ResNet block, a ConvNeXt-V2 block (global response
normalization), a WaveNet residual stack (dilated causal convolutions, a gated activation through ``chunk``),
a GPT-NeoX layer (attention and MLP in parallel, rotary embedding on a quarter of each head, fused qkv split
per head), and a sub-pixel upsampler (``pixel_shuffle``, PReLU)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class T5RMSNorm(nn.Module):
    """T5's layer norm: a scale, no bias, no mean subtracted, the variance in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))  # away from a fresh module's ones
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps)).to(self.weight.dtype)


class T5Layer(nn.Module):
    """One T5 encoder layer: pre-norm self-attention with a learned relative position bias (one table, bucketed
    by distance, added to the unscaled scores) and a ReLU feed-forward, no biases anywhere."""

    def __init__(self, dim: int, heads: int, ff: int, seq: int, buckets: int = 32):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm1, self.norm2 = T5RMSNorm(dim), T5RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.wi = nn.Linear(dim, ff, bias=False)
        self.wo = nn.Linear(ff, dim, bias=False)
        self.bias = nn.Embedding(buckets, heads)
        rel = torch.arange(seq)[None, :] - torch.arange(seq)[:, None]
        bucket = torch.clamp(rel.abs(), max=buckets // 2 - 1) + (rel > 0).long() * (buckets // 2)
        self.register_buffer("bucket", bucket, persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) + self.bias(self.bucket).permute(2, 0, 1)[None]
        attn = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        x = x + self.o((attn @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.wo(F.relu(self.wi(self.norm2(x))))


class SEBasicBlock(nn.Module):
    """A ResNet basic block with squeeze-excitation before the residual add, in-place ReLUs as torchvision writes
    them."""

    def __init__(self, channels: int, reduction: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.fc1 = nn.Conv2d(channels, channels // reduction, 1)
        self.fc2 = nn.Conv2d(channels // reduction, channels, 1)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        w = torch.sigmoid(self.fc2(self.relu(self.fc1(F.adaptive_avg_pool2d(out, 1)))))
        out = out * w
        out += x
        return self.relu(out)


class SEStage(nn.Module):
    def __init__(self, channels: int, blocks: int):
        super().__init__()
        self.blocks = nn.Sequential(*(SEBasicBlock(channels) for _ in range(blocks)))

    def forward(self, x):
        return self.blocks(x)


class GRN(nn.Module):
    """ConvNeXt-V2's global response normalization over channels-last activations."""

    def __init__(self, dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.randn(1, 1, 1, dim) * 0.5)  # zeros when trained from scratch: not here
        self.beta = nn.Parameter(torch.randn(1, 1, 1, dim) * 0.5)

    def forward(self, x):
        gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class ConvNeXtV2Block(nn.Module):
    """Depthwise 7x7, LayerNorm over channels (permuted to channels-last), pointwise MLP with GELU and GRN,
    back to channels-first, residual."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.grn = GRN(4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        h = self.dwconv(x).permute(0, 2, 3, 1)
        h = self.pw2(self.grn(F.gelu(self.pw1(self.norm(h)))))
        return x + h.permute(0, 3, 1, 2)


class WaveNetStack(nn.Module):
    """Residual layers of dilations 1, 2, 4, ...: a causal dilated conv (padded both sides, the tail sliced off)
    to twice the channels, ``tanh(a) * sigmoid(b)`` of its two halves, a 1x1 conv to the residual and one to
    the skip sum."""

    def __init__(self, channels: int, layers: int):
        super().__init__()
        self.dilated = nn.ModuleList(nn.Conv1d(channels, 2 * channels, 2, dilation=2 ** i, padding=2 ** i)
                                     for i in range(layers))
        self.res = nn.ModuleList(nn.Conv1d(channels, channels, 1) for _ in range(layers))
        self.skip = nn.ModuleList(nn.Conv1d(channels, channels, 1) for _ in range(layers))

    def forward(self, x):
        skips = 0
        for dil, res, skip in zip(self.dilated, self.res, self.skip):
            h = dil(x)[..., : x.shape[-1]]
            a, b = h.chunk(2, dim=1)
            g = torch.tanh(a) * torch.sigmoid(b)
            x = (x + res(g)) * math.sqrt(0.5)
            skips = skips + skip(g)
        return F.relu(skips)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class NeoXLayer(nn.Module):
    """A GPT-NeoX layer: x + attn(ln1(x)) + mlp(ln2(x)) (parallel residual), qkv from one Linear viewed per head
    as (3 * head_dim) and split, rotary embedding on the first quarter of each head's dims, causal SDPA."""

    def __init__(self, dim: int, heads: int, seq: int, rotary_pct: float = 0.25):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.rot = int(self.head_dim * rotary_pct)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.dense = nn.Linear(dim, dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)
        inv = 1.0 / (10000 ** (torch.arange(0, self.rot, 2).float() / self.rot))
        freqs = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)

    def _rope(self, t):
        r, rest = t[..., : self.rot], t[..., self.rot:]
        cos, sin = self.cos.to(t.dtype), self.sin.to(t.dtype)
        return torch.cat((r * cos + _rotate_half(r) * sin, rest), dim=-1)

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, self.heads, 3 * self.head_dim).permute(0, 2, 1, 3)
        q, k, v = qkv.split(self.head_dim, dim=-1)
        y = F.scaled_dot_product_attention(self._rope(q), self._rope(k), v, is_causal=True)
        attn = self.dense(y.transpose(1, 2).reshape(b, s, d))
        mlp = self.down(F.gelu(self.up(self.ln2(x))))
        return x + attn + mlp


class SubPixelUpsampler(nn.Module):
    """ESPCN-style x2 upsampling: conv to 4x the channels, ``pixel_shuffle``, PReLU, a 3x3 conv."""

    def __init__(self, channels: int):
        super().__init__()
        self.expand = nn.Conv2d(channels, 4 * channels, 3, padding=1)
        self.act = nn.PReLU(channels)
        self.out = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.out(self.act(F.pixel_shuffle(self.expand(x), 2)))
