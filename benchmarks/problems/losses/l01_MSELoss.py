"""Mean squared error between fp32 predictions and targets of shape [60, 1024, 2047], reduced to a scalar mean."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.mse_loss(predictions, targets)


batch_size = 60
seq_len = 1024
dim = 2047
SMALL_SIZES = {"batch_size": 1, "seq_len": 3, "dim": 5}


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim), torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return []
