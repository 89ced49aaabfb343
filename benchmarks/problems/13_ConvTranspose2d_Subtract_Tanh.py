"""Stride-2 transposed convolution, subtraction of a learned per-channel bias, then tanh."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = x - self.bias
        x = torch.tanh(x)
        return x


batch_size = 16
in_channels = 64
out_channels = 32
height = width = 32
kernel_size = 4
stride = 2
padding = 1
output_padding = 0
SMALL_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 5, "width": 4}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding]
