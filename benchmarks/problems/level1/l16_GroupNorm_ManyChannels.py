"""nn.GroupNorm(32, 1920) over fp32 [64, 1920, 31, 33]: 32 groups of 60 channels."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_groups, num_features):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, num_features)
        with torch.no_grad():
            self.gn.weight.copy_(1.0 + 0.1 * torch.randn(num_features))
            self.gn.bias.copy_(0.1 * torch.randn(num_features))

    def forward(self, x):
        return self.gn(x)


batch_size = 64
features = 1920
num_groups = 32
height = 31
width = 33
SMALL_SIZES = {"batch_size": 2, "features": 8, "num_groups": 4, "height": 3, "width": 5}


def get_inputs():
    return [torch.randn(batch_size, features, height, width)]


def get_init_inputs():
    return [num_groups, features]
