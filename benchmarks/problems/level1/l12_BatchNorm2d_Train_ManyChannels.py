"""nn.BatchNorm2d(2000) in training mode over fp32 [16, 2000, 57, 61]: 2000 channels of 56K values."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            self.bn.weight.copy_(1.0 + 0.1 * torch.randn(num_features))
            self.bn.bias.copy_(0.1 * torch.randn(num_features))

    def forward(self, x):
        return self.bn(x)


batch_size = 16
features = 2000
height = 57
width = 61
SMALL_SIZES = {"batch_size": 2, "features": 7, "height": 3, "width": 5}


def get_inputs():
    return [torch.randn(batch_size, features, height, width)]


def get_init_inputs():
    return [features]
