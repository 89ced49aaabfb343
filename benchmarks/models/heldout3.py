"""A third set of models written before anything was tuned for them (issue 49's "whole models you have not
seen"), in forms not in the corpus before: a ConvLSTM cell (conv over a concat, ``chunk`` into gates), a
PointNet encoder (1x1 conv1d, BatchNorm1d, a max over points, ``view``), a Conformer convolution module
(GLU over channels, a depthwise conv1d of width 31, BatchNorm1d, SiLU, transposes), causal attention with ALiBi
biases built in ``forward`` (``torch.arange``, ``triu``, ``masked_fill``, einsums), a grouped-query attention
block with ``nn.RMSNorm``, rotate-half RoPE and ``repeat_interleave``, a YOLO-style neck (LeakyReLU in place,
``nn.Upsample``, a concat with a skip, a sigmoid over a channel slice), a RegNetY block (grouped 3x3 conv, a
squeeze-excitation by ``mean(keepdim=True)``, a strided projection shortcut), DeiT tokens (class and
distillation tokens expanded and concatenated, an ``nn.TransformerEncoderLayer`` with ``norm_first``, two heads
averaged) and a Perceiver cross-attention (``nn.MultiheadAttention`` over latents with a key padding mask)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ConvLSTMCell(nn.Module):
    """One ConvLSTM step: a 3x3 conv over ``cat(x, h)`` to four gate maps, ``chunk`` into them, the LSTM update."""

    def __init__(self, channels: int, hidden: int):
        super().__init__()
        self.gates = nn.Conv2d(channels + hidden, 4 * hidden, 3, padding=1)

    def forward(self, x, h, c):
        i, f, g, o = torch.chunk(self.gates(torch.cat([x, h], dim=1)), 4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class PointNetEncoder(nn.Module):
    """PointNet's shared MLP as 1x1 conv1d with BatchNorm1d and ReLU (3 -> 64 -> 128 -> width), a max over the
    points, then two linear layers with BatchNorm1d."""

    def __init__(self, width: int, out: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv1d(3, 64, 1), nn.BatchNorm1d(64), nn.ReLU(),
                                 nn.Conv1d(64, 128, 1), nn.BatchNorm1d(128), nn.ReLU(),
                                 nn.Conv1d(128, width, 1), nn.BatchNorm1d(width))
        self.head = nn.Sequential(nn.Linear(width, width // 2), nn.BatchNorm1d(width // 2), nn.ReLU(inplace=True),
                                  nn.Dropout(0.3), nn.Linear(width // 2, out))
        self.width = width

    def forward(self, points):  # [B, 3, N]
        x = torch.max(self.mlp(points), 2, keepdim=True)[0]
        return self.head(x.view(-1, self.width))


class ConformerConv(nn.Module):
    """The Conformer convolution module on [B, T, C]: LayerNorm, pointwise conv to 2C, GLU, depthwise conv of
    width 31, BatchNorm1d, SiLU, pointwise conv, residual."""

    def __init__(self, dim: int, kernel: int = 31):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Conv1d(dim, 2 * dim, 1)
        self.dw = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.pw2 = nn.Conv1d(dim, dim, 1)

    def forward(self, x):
        y = self.norm(x).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = self.pw2(F.silu(self.bn(self.dw(y))))
        return x + y.transpose(1, 2)


class ALiBiAttention(nn.Module):
    """Causal self-attention with ALiBi: per-head slopes times the key-query distance added to the scores, the
    causal mask built in ``forward`` with ``triu`` and ``masked_fill``, scores and values by einsum."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.register_buffer("slopes", torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)]))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        pos = torch.arange(t, device=x.device)
        bias = self.slopes[:, None, None] * (pos[None, :] - pos[:, None]).to(x.dtype)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.hd) + bias
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        probs = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
        y = torch.einsum("bhqk,bhkd->bhqd", probs, v)
        return x + self.out(y.transpose(1, 2).reshape(b, t, -1))


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class GQABlock(nn.Module):
    """A Mistral-style attention half-block: ``nn.RMSNorm``, separate q, k, v projections, rotate-half RoPE
    from cos / sin buffers, kv heads repeated by ``repeat_interleave``, causal SDPA, output projection,
    residual."""

    def __init__(self, dim: int, heads: int, kv_heads: int, max_len: int):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv_heads, dim // heads
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        ang = torch.outer(torch.arange(max_len).float(), inv)
        self.register_buffer("cos", torch.cat([ang, ang], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([ang, ang], -1).sin(), persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(y.transpose(1, 2).reshape(b, t, -1))


def _cbl(cin: int, cout: int, k: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.LeakyReLU(0.1, inplace=True))


class YoloNeck(nn.Module):
    """A YOLOv3-style neck step: conv-BN-LeakyReLU on the deep map, nearest x2 upsample, concat with the skip,
    two convs, a 1x1 prediction conv whose first 4 channels (box) pass a sigmoid and the rest stay logits."""

    def __init__(self, deep: int, skip: int, outs: int):
        super().__init__()
        self.reduce = _cbl(deep, deep // 2, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.fuse = nn.Sequential(_cbl(deep // 2 + skip, skip, 1), _cbl(skip, 2 * skip, 3))
        self.pred = nn.Conv2d(2 * skip, outs, 1)

    def forward(self, deep, skip):
        y = self.pred(self.fuse(torch.cat([self.up(self.reduce(deep)), skip], 1)))
        return torch.cat([torch.sigmoid(y[:, :4]), y[:, 4:]], 1)


class RegNetYBlock(nn.Module):
    """RegNetY's bottleneck: 1x1 conv-BN-ReLU, 3x3 grouped conv (group width 8) with stride 2, BN, ReLU, a
    squeeze-excitation (``mean((2, 3), keepdim=True)``, 1x1, ReLU, 1x1, sigmoid), 1x1 conv-BN, a strided 1x1
    projection shortcut with BN, the sum through an in-place ReLU."""

    def __init__(self, cin: int, cout: int, group_width: int = 8):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, 2, 1, groups=cout // group_width, bias=False),
                               nn.BatchNorm2d(cout), nn.ReLU(inplace=True))
        self.se = nn.Sequential(nn.Conv2d(cout, cin // 4, 1), nn.ReLU(inplace=True), nn.Conv2d(cin // 4, cout, 1),
                                nn.Sigmoid())
        self.c = nn.Sequential(nn.Conv2d(cout, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, 2, bias=False), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.b(self.a(x))
        y = self.c(y * self.se(y.mean((2, 3), keepdim=True)))
        return self.relu(y + self.proj(x))


class DeiTTokens(nn.Module):
    """DeiT's token handling around one encoder layer: a 16x16 patch conv, ``flatten(2).transpose(1, 2)``, class
    and distillation tokens expanded over the batch and concatenated, positional embeddings added, an
    ``nn.TransformerEncoderLayer`` (pre-norm, GELU, batch first), the two tokens' heads averaged."""

    def __init__(self, dim: int, heads: int, image: int, classes: int):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        n = (image // 16) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.dist = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 2, dim) * 0.02)
        self.layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                                batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(dim)
        self.head, self.head_dist = nn.Linear(dim, classes), nn.Linear(dim, classes)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        b = x.shape[0]
        x = torch.cat([self.cls.expand(b, -1, -1), self.dist.expand(b, -1, -1), x], dim=1) + self.pos
        x = self.norm(self.layer(x))
        return (self.head(x[:, 0]) + self.head_dist(x[:, 1])) / 2


class PerceiverCross(nn.Module):
    """A Perceiver cross-attention: learned latents expanded over the batch attend to the inputs through
    ``nn.MultiheadAttention`` (batch first, a boolean key padding mask, kv width different from the latents'),
    then a GELU MLP, both with pre-norm residuals."""

    def __init__(self, latents: int, dim: int, kv_dim: int, heads: int):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(latents, dim) * 0.02)
        self.norm_q, self.norm_kv = nn.LayerNorm(dim), nn.LayerNorm(kv_dim)
        self.attn = nn.MultiheadAttention(dim, heads, kdim=kv_dim, vdim=kv_dim, batch_first=True)
        self.norm_mlp = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, inputs, keep):  # keep: [B, N], 1.0 where a token is real
        b = inputs.shape[0]
        q = self.latents.unsqueeze(0).expand(b, -1, -1)
        kv = self.norm_kv(inputs)
        y, _ = self.attn(self.norm_q(q), kv, kv, key_padding_mask=keep == 0, need_weights=False)
        x = q + y
        return x + self.mlp(self.norm_mlp(x))
