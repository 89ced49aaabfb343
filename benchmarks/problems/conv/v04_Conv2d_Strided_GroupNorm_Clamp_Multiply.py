"""Conv2d 64->128 (4x4, stride 2, padding 1) on [64, 64, 128, 128], GroupNorm(16), clamp, per-channel multiply, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups, clamp_limit):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=2, padding=1)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)
        self.multiplier = nn.Parameter(torch.randn(out_channels, 1, 1))
        self.clamp_limit = clamp_limit

    def forward(self, x):
        y = self.conv(x)
        y = self.group_norm(y)
        y = torch.clamp(y, -self.clamp_limit, self.clamp_limit)
        return y * self.multiplier


batch_size = 64
in_channels = 64
out_channels = 128
height = width = 128
kernel_size = 4
num_groups = 16
clamp_limit = 1.5
SMALL_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 9, "width": 8, "num_groups": 3}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, clamp_limit]
