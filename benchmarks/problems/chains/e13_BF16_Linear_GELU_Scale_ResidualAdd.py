"""bf16 Linear 8192->8192 on 8192 rows, GELU, scale by a constant, then add the input back (residual)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.linear = nn.Linear(features, features, dtype=torch.bfloat16)
        self.scale = scale

    def forward(self, x):
        y = F.gelu(self.linear(x))
        y = y * self.scale
        return y + x


batch_size = 8192
features = 8192
scale = 0.75
SMALL_SIZES = {"batch_size": 5, "features": 33}


def get_inputs():
    return [torch.randn(batch_size, features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [features, scale]
