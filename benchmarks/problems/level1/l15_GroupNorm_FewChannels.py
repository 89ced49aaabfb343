"""nn.GroupNorm(2, 6) over fp32 [40, 6, 719, 723]: 2 groups of 3 channels, 1.6M values per group."""

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


batch_size = 40
features = 6
num_groups = 2
height = 719
width = 723
SMALL_SIZES = {"batch_size": 2, "features": 6, "num_groups": 2, "height": 5, "width": 3}


def get_inputs():
    return [torch.randn(batch_size, features, height, width)]


def get_init_inputs():
    return [num_groups, features]
