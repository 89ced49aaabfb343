"""nn.BatchNorm2d(96) in training mode over fp32 [6007, 96, 11, 13]: a large batch of 11x13 maps."""

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


batch_size = 6007
features = 96
height = 11
width = 13
SMALL_SIZES = {"batch_size": 5, "features": 3, "height": 2, "width": 3}


def get_inputs():
    return [torch.randn(batch_size, features, height, width)]


def get_init_inputs():
    return [features]
