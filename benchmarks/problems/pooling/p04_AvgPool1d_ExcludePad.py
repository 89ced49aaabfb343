"""nn.AvgPool1d (kernel 7, stride 3, padding 3, count_include_pad=False) over fp32 [128, 61, 25601] sequences."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size, stride=stride, padding=padding, count_include_pad=False)

    def forward(self, x):
        return self.pool(x)


batch = 128
channels = 61
length = 25601
kernel_size = 7
stride = 3
padding = 3
SMALL_SIZES = {"batch": 2, "channels": 3, "length": 13}


def get_inputs():
    return [torch.randn(batch, channels, length)]


def get_init_inputs():
    return [kernel_size, stride, padding]
