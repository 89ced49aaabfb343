"""Linear 4096->8192 on 2048 rows, divided by a temperature, then softmax over the 8192 features, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, temperature):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.temperature = temperature

    def forward(self, x):
        y = self.linear(x) / self.temperature
        return torch.softmax(y, dim=1)


batch_size = 2048
in_features = 4096
out_features = 8192
temperature = 1.5
SMALL_SIZES = {"batch_size": 1, "in_features": 27, "out_features": 37}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, temperature]
