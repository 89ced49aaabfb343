"""Dilated Conv2d 128->128 (3x3, dilation 2, padding 2) on [64, 128, 64, 64], 2x2 max pool, then GELU, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation, pool_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=dilation * (kernel_size - 1) // 2,
                              dilation=dilation)
        self.pool = nn.MaxPool2d(pool_size)

    def forward(self, x):
        y = self.pool(self.conv(x))
        return F.gelu(y)


batch_size = 64
in_channels = 128
out_channels = 128
height = width = 64
kernel_size = 3
dilation = 2
pool_size = 2
SMALL_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 9, "width": 6}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, dilation, pool_size]
