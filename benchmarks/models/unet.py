"""A small UNet as the popular PyTorch port writes it: ``DoubleConv`` (conv, batch norm, in-place ReLU,
twice), ``Down`` (max pool, double conv), ``Up`` (``ConvTranspose2d`` or bilinear ``nn.Upsample``, ``F.pad``
to the skip's size, ``torch.cat`` with the skip, double conv), a 1x1 output conv."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DoubleConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, mid_channels: int | None = None):
        super().__init__()
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, bilinear: bool = True):
        super().__init__()
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
        else:
            self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        diffY = x2.size()[2] - x1.size()[2]
        diffX = x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels: int, n_classes: int, base: int = 64, depth: int = 4, bilinear: bool = False):
        super().__init__()
        factor = 2 if bilinear else 1
        self.inc = DoubleConv(n_channels, base)
        self.downs = nn.ModuleList()
        ch = base
        for i in range(depth):
            out = ch * 2 // (factor if i == depth - 1 else 1)
            self.downs.append(Down(ch, out))
            ch *= 2
        self.ups = nn.ModuleList()
        for i in range(depth):
            self.ups.append(Up(ch, ch // 2 // (factor if i < depth - 1 else 1), bilinear))
            ch //= 2
        self.outc = nn.Conv2d(base, n_classes, kernel_size=1)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)
