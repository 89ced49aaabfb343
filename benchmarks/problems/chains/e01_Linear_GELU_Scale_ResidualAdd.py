"""Linear 4096->4096 on 4096 rows, GELU, scale by a constant, then add the input back (residual), fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x):
        y = F.gelu(self.linear(x))
        y = y * self.scale
        return y + x


batch_size = 4096
features = 4096
scale = 0.75
SMALL_SIZES = {"batch_size": 5, "features": 33}


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, scale]
