"""Mean hinge loss clamp(1 - pred * target, min=0) over fp32 [32768, 4000] scores with targets in {-1, 1}."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.clamp(1 - predictions * targets, min=0).mean()


batch_size = 32768
num_labels = 4000
SMALL_SIZES = {"batch_size": 5, "num_labels": 3}


def get_inputs():
    predictions = torch.randn(batch_size, num_labels)
    targets = torch.randn(batch_size, num_labels).sign()
    return [predictions, targets]


def get_init_inputs():
    return []
