"""Bias-free Conv1d 128->256 channels (kernel 5, padding 2) on [128, 128, 2048], a per-channel scale, ReLU, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.scale = nn.Parameter(torch.randn(out_channels, 1))

    def forward(self, x):
        y = self.conv(x) * self.scale
        return torch.relu(y)


batch_size = 128
in_channels = 128
out_channels = 256
length = 2048
kernel_size = 5
SMALL_SIZES = {"batch_size": 1, "in_channels": 3, "out_channels": 5, "length": 11}


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
