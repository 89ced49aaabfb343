"""Linear 4096->4096 on 4096 rows, inference BatchNorm1d from running-statistic buffers, then Swish, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn_weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_features))
        self.bn_bias = nn.Parameter(0.1 * torch.randn(out_features))
        self.register_buffer("running_mean", 0.1 * torch.randn(out_features))
        self.register_buffer("running_var", 0.5 + torch.rand(out_features))
        self.eps = eps

    def forward(self, x):
        y = self.linear(x)
        y = F.batch_norm(y, self.running_mean, self.running_var, self.bn_weight, self.bn_bias,
                         training=False, eps=self.eps)
        return y * torch.sigmoid(y)


batch_size = 4096
in_features = 4096
out_features = 4096
eps = 1e-5
SMALL_SIZES = {"batch_size": 9, "in_features": 16, "out_features": 11}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, eps]
