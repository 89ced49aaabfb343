"""Mean cross-entropy of fp32 logits [32768, 4097] against int64 class-index targets [32768]."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


batch_size = 32768
num_classes = 4097
SMALL_SIZES = {"batch_size": 5, "num_classes": 7}


def get_inputs():
    logits = torch.randn(batch_size, num_classes)
    targets = torch.randint(0, num_classes, (batch_size,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []
