"""nn.BatchNorm2d(64) in training mode over fp32 [15, 64, 512, 512]: KernelBench 33_BatchNorm, batch 64 cut to 15."""

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


batch_size = 15
features = 64
height = 512
width = 512
SMALL_SIZES = {"batch_size": 2, "features": 3, "height": 5, "width": 3}


def get_inputs():
    return [torch.randn(batch_size, features, height, width)]


def get_init_inputs():
    return [features]
