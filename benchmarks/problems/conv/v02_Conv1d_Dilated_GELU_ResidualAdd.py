"""Dilated Conv1d 256->256 channels (kernel 3, dilation 4, same length) on [32, 256, 4096], GELU, plus the input, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size, dilation):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, padding=dilation * (kernel_size - 1) // 2, dilation=dilation)

    def forward(self, x):
        y = F.gelu(self.conv(x))
        return y + x


batch_size = 32
channels = 256
length = 4096
kernel_size = 3
dilation = 4
SMALL_SIZES = {"batch_size": 2, "channels": 5, "length": 13}


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, kernel_size, dilation]
