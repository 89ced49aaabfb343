"""A ConvNeXt block: 7x7 depthwise conv, a channels-last LayerNorm (``permute``), a 4x pointwise MLP as
``nn.Linear`` layers with GELU, a learned per-channel layer scale, a residual."""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, layer_scale_init_value: float = 1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones(dim))

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        return input + x


class ConvNeXtStage(nn.Module):
    """A downsampling layer (channels-first LayerNorm written by hand, 2x2 stride-2 conv) and ``depth`` blocks."""

    def __init__(self, in_dim: int, dim: int, depth: int):
        super().__init__()
        self.norm_weight = nn.Parameter(torch.ones(in_dim))
        self.norm_bias = nn.Parameter(torch.zeros(in_dim))
        self.down = nn.Conv2d(in_dim, dim, kernel_size=2, stride=2)
        self.blocks = nn.Sequential(*[Block(dim, layer_scale_init_value=0.5) for _ in range(depth)])

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + 1e-6)
        x = self.norm_weight[:, None, None] * x + self.norm_bias[:, None, None]
        return self.blocks(self.down(x))
