"""bf16 Linear 8192->16384 on 4096 rows, divided by a temperature, then softmax over the 16384 features."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, temperature):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.bfloat16)
        self.temperature = temperature

    def forward(self, x):
        y = self.linear(x) / self.temperature
        return torch.softmax(y, dim=1)


batch_size = 4096
in_features = 8192
out_features = 16384
temperature = 1.5
SMALL_SIZES = {"batch_size": 1, "in_features": 27, "out_features": 37}


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features, temperature]
