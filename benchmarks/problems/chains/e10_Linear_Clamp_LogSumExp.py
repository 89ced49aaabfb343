"""Linear 4096->4096 on 4096 rows, clamped to [-3, 3], then logsumexp over the features (keepdim), fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, clamp_min, clamp_max):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        y = self.linear(x)
        y = torch.clamp(y, min=self.clamp_min, max=self.clamp_max)
        return torch.logsumexp(y, dim=1, keepdim=True)


batch_size = 4096
in_features = 4096
out_features = 4096
clamp_min = -3.0
clamp_max = 3.0
SMALL_SIZES = {"batch_size": 6, "in_features": 25, "out_features": 9}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, clamp_min, clamp_max]
