"""ConvTranspose2d 256->128 (3x3, stride 2, padding 1, output padding 1) on [32, 256, 64, 64], Mish, 3x3/2 max pool, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        y = F.mish(self.conv_t(x))
        return F.max_pool2d(y, kernel_size=3, stride=2, padding=1)


batch_size = 32
in_channels = 256
out_channels = 128
height = width = 64
kernel_size = 3
SMALL_SIZES = {"batch_size": 1, "in_channels": 4, "out_channels": 3, "height": 5, "width": 6}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
