"""A second set of models written before anything was tuned for them (issue 49's "whole models you have not
seen"), each tried through the backend on the CPU as it was first written (all six matched float64, none
refused): a MobileNetV3 block (hardswish, a squeeze-excitation with hardsigmoid), a GAN-style decoder
(transposed conv, GLU, instance norm, leaky ReLU, tanh), a TextCNN (embedding, three conv1d widths, max over
time, concat, log-softmax), a Swin-style shifted-window attention (``torch.roll``, window partition by
view/permute, ``unbind``), a dense top-2 mixture of experts (``topk``, ``scatter``, einsums) and an ``nn.LSTM``
classifier (two layers, the last step plus the final hidden state)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MBConvV3(nn.Module):
    """MobileNetV3 inverted residual: 1x1 expand, BN, hardswish, depthwise 5x5, BN, hardswish, a
    squeeze-excitation (pool, 1x1, ReLU, 1x1, hardsigmoid), 1x1 project, BN, residual."""

    def __init__(self, channels: int, expand: int):
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Sequential(nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                                    nn.Hardswish(inplace=True))
        self.dw = nn.Sequential(nn.Conv2d(hidden, hidden, 5, padding=2, groups=hidden, bias=False),
                                nn.BatchNorm2d(hidden), nn.Hardswish())
        self.se1, self.se2 = nn.Conv2d(hidden, hidden // 4, 1), nn.Conv2d(hidden // 4, hidden, 1)
        self.project = nn.Sequential(nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        y = self.dw(self.expand(x))
        w = F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(y, 1)))))
        return x + self.project(y * w)


class GatedDecoder(nn.Module):
    """A GAN generator's upsampling step: transposed conv (x2) to twice the channels, GLU over them, instance
    norm, leaky ReLU, a 3x3 conv to RGB, tanh."""

    def __init__(self, channels: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, 2 * channels, 4, stride=2, padding=1)
        self.norm = nn.InstanceNorm2d(channels, affine=True)
        self.out = nn.Conv2d(channels, 3, 3, padding=1)

    def forward(self, x):
        y = F.glu(self.up(x), dim=1)
        return torch.tanh(self.out(F.leaky_relu(self.norm(y), 0.2)))


class TextCNN(nn.Module):
    """Kim's TextCNN: token embedding, conv1d of widths 2, 3 and 4 with ReLU, max over time, concat, a linear
    classifier, log-softmax."""

    def __init__(self, vocab: int, dim: int, filters: int, classes: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.convs = nn.ModuleList(nn.Conv1d(dim, filters, k) for k in (2, 3, 4))
        self.fc = nn.Linear(3 * filters, classes)

    def forward(self, tokens):
        e = self.emb(tokens).transpose(1, 2)
        pooled = [F.relu(c(e)).amax(dim=-1) for c in self.convs]
        return F.log_softmax(self.fc(torch.cat(pooled, dim=1)), dim=-1)


class ShiftedWindowAttention(nn.Module):
    """Swin's shifted-window block half on a [B, H, W, C] map: LayerNorm, ``torch.roll`` by half a window,
    window partition (view/permute), qkv through one Linear and ``unbind``, softmax attention per window,
    projection, the partition undone, rolled back, residual. (No attention mask: every window attends
    within itself.)"""

    def __init__(self, dim: int, heads: int, window: int):
        super().__init__()
        self.window, self.shift, self.heads = window, window // 2, heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, h, w, c = x.shape
        s, n = self.window, self.window * self.window
        y = torch.roll(self.norm(x), shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = y.view(b, h // s, s, w // s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
        q, k, v = self.qkv(y).reshape(y.shape[0], n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        o = (a.softmax(-1) @ v).transpose(1, 2).reshape(-1, n, c)
        o = self.proj(o).view(b, h // s, w // s, s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return x + torch.roll(o, shifts=(self.shift, self.shift), dims=(1, 2))


class DenseMoE(nn.Module):
    """A top-2 mixture of experts computed densely: a softmax over the two largest router logits scattered into
    the gates, every expert's GELU MLP through einsums, the gated sum."""

    def __init__(self, dim: int, ff: int, experts: int):
        super().__init__()
        self.router = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, dim, ff) * dim ** -0.5)
        self.w2 = nn.Parameter(torch.randn(experts, ff, dim) * ff ** -0.5)

    def forward(self, x):
        logits = self.router(x)
        top, idx = logits.topk(2, dim=-1)
        gate = torch.zeros_like(logits).scatter(-1, idx, top.softmax(-1))
        h = F.gelu(torch.einsum("bsd,edf->bsef", x, self.w1))
        y = torch.einsum("bsef,efd->bsed", h, self.w2)
        return (y * gate.unsqueeze(-1)).sum(-2)


class LSTMClassifier(nn.Module):
    """A two-layer ``nn.LSTM`` (batch first), its last step plus the top layer's final hidden state, LayerNorm,
    a linear classifier."""

    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.norm = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        out, (hn, _) = self.lstm(x)
        return self.fc(self.norm(out[:, -1] + hn[-1]))
