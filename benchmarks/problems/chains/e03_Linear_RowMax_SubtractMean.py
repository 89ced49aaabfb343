"""Linear 4096->2048 on 8192 rows, each row's max (keepdim) minus that row's mean: a [8192, 1] result, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = self.linear(x)
        peak = torch.max(y, dim=1, keepdim=True).values
        return peak - y.mean(dim=1, keepdim=True)


batch_size = 8192
in_features = 4096
out_features = 2048
SMALL_SIZES = {"batch_size": 7, "in_features": 24, "out_features": 13}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
