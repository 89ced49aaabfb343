"""Linear 4096->8192 on 2048 rows, AvgPool1d (kernel 4) along the features, then the sum of each row, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features, pool_kernel):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.pool_kernel = pool_kernel

    def forward(self, x):
        y = self.linear(x).unsqueeze(1)
        y = F.avg_pool1d(y, kernel_size=self.pool_kernel)
        return y.sum(dim=2)


batch_size = 2048
in_features = 4096
out_features = 8192
pool_kernel = 4
SMALL_SIZES = {"batch_size": 5, "in_features": 20, "out_features": 35}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, pool_kernel]
