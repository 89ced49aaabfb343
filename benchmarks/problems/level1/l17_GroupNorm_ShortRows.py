"""nn.GroupNorm(40, 120) over fp32 [16381, 120, 7, 5]: 655K groups of 105 values."""

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


batch_size = 16381
features = 120
num_groups = 40
height = 7
width = 5
SMALL_SIZES = {"batch_size": 3, "features": 6, "num_groups": 2, "height": 3, "width": 2}


def get_inputs():
    return [torch.randn(batch_size, features, height, width)]


def get_init_inputs():
    return [num_groups, features]
