"""Grouped ConvTranspose2d 256->256 (3x3, padding 1, 4 groups) on [64, 256, 64, 64], GELU, plus the input, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size, groups):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=groups)

    def forward(self, x):
        y = F.gelu(self.conv_t(x))
        return y + x


batch_size = 64
channels = 256
height = width = 64
kernel_size = 3
groups = 4
SMALL_SIZES = {"batch_size": 2, "channels": 6, "height": 5, "width": 8, "groups": 2}


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, groups]
