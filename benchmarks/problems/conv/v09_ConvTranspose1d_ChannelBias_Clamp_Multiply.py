"""ConvTranspose1d 256->128 (kernel 4, stride 2, padding 1) on [128, 256, 2048], channel bias, clamp, times a scalar, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, multiplier):
        super().__init__()
        self.conv_t = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=2, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1))
        self.multiplier = multiplier

    def forward(self, x):
        y = self.conv_t(x) + self.bias
        y = torch.clamp(y, min=-1.0, max=1.0)
        return y * self.multiplier


batch_size = 128
in_channels = 256
out_channels = 128
length = 2048
kernel_size = 4
multiplier = 2.5
SMALL_SIZES = {"batch_size": 1, "in_channels": 5, "out_channels": 3, "length": 9}


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, multiplier]
