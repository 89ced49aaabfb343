"""A diffusion-UNet residual block (DDPM / Stable Diffusion style): GroupNorm, SiLU, 3x3 conv; the sinusoidal
timestep embedding through a two-layer SiLU MLP, projected and added per channel (``[:, :, None, None]``);
GroupNorm, SiLU, dropout, 3x3 conv; a 1x1 skip conv when the channels change."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def timestep_embedding(timesteps: torch.Tensor, dim: int, max_period: int = 10000) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
    args = timesteps[:, None].float() * freqs[None].to(timesteps.device)
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    return embedding.to(timesteps.dtype)


class ResBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, temb_channels: int, groups: int = 32,
                 dropout: float = 0.0):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, in_channels, eps=1e-6)
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.temb_proj = nn.Linear(temb_channels, out_channels)
        self.norm2 = nn.GroupNorm(groups, out_channels, eps=1e-6)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1)
        if in_channels != out_channels:
            self.nin_shortcut = nn.Conv2d(in_channels, out_channels, kernel_size=1)
        else:
            self.nin_shortcut = nn.Identity()

    def forward(self, x, temb):
        h = x
        h = self.norm1(h)
        h = F.silu(h)
        h = self.conv1(h)
        h = h + self.temb_proj(F.silu(temb))[:, :, None, None]
        h = self.norm2(h)
        h = F.silu(h)
        h = self.dropout(h)
        h = self.conv2(h)
        return self.nin_shortcut(x) + h


class TimeConditionedResBlock(nn.Module):
    """The timestep embedding MLP and one ResBlock: ``(x, timesteps)`` in, the block's output out."""

    def __init__(self, in_channels: int, out_channels: int, model_channels: int, groups: int = 32):
        super().__init__()
        self.model_channels = model_channels
        temb = model_channels * 4
        self.time_embed = nn.Sequential(nn.Linear(model_channels, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.block = ResBlock(in_channels, out_channels, temb, groups)

    def forward(self, x, timesteps):
        emb = self.time_embed(timestep_embedding(timesteps, self.model_channels))
        return self.block(x, emb)
