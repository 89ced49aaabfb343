"""Grouped Conv2d 256->256 (3x3, padding 1, 8 groups) on [64, 256, 56, 56], ReLU, then the mean over H and W, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, kernel_size, groups):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=groups)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return y.mean(dim=(2, 3))


batch_size = 64
channels = 256
height = width = 56
kernel_size = 3
groups = 8
SMALL_SIZES = {"batch_size": 1, "channels": 6, "height": 5, "width": 7, "groups": 3}


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, groups]
