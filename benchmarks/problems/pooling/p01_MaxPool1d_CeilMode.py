"""nn.MaxPool1d (kernel 4, stride 3, padding 1, ceil_mode) over fp32 [64, 96, 32773] sequences."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride=stride, padding=padding, ceil_mode=True)

    def forward(self, x):
        return self.pool(x)


batch = 64
channels = 96
length = 32773
kernel_size = 4
stride = 3
padding = 1
SMALL_SIZES = {"batch": 2, "channels": 3, "length": 13}


def get_inputs():
    return [torch.randn(batch, channels, length)]


def get_init_inputs():
    return [kernel_size, stride, padding]
