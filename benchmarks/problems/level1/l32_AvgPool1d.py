"""nn.AvgPool1d(8, stride=1, padding=4) over fp32 [31, 128, 65536]: 44_Average_Pooling_1D, batch 64 cut to 31."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


batch_size = 31
features = 128
length = 65536
kernel_size = 8
stride = 1
padding = 4
SMALL_SIZES = {"batch_size": 2, "features": 3, "length": 13}


def get_inputs():
    return [torch.randn(batch_size, features, length)]


def get_init_inputs():
    return [kernel_size, stride, padding]
