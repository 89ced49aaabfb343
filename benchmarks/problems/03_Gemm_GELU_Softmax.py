"""Linear layer, exact GELU, then softmax over the output features."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.nn.functional.gelu(x)
        x = torch.softmax(x, dim=1)
        return x


batch_size = 128
in_features = 2048
out_features = 4096
SMALL_SIZES = {"batch_size": 8, "in_features": 32, "out_features": 48}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
