"""fp32 Linear, sigmoid, then the pre-activation added back: out = y + sigmoid(y), y = Linear(x)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = self.linear(x)
        return y + torch.sigmoid(y)


batch_size = 1024
in_features = 8192
out_features = 8192
SMALL_SIZES = {"batch_size": 8, "in_features": 40, "out_features": 24}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
