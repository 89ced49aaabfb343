"""Triplet margin loss (margin 0.5, L2 distance, mean) over fp32 anchor/positive/negative embeddings [65521, 1280]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.loss = nn.TripletMarginLoss(margin=margin, p=2.0)

    def forward(self, anchor, positive, negative):
        return self.loss(anchor, positive, negative)


batch_size = 65521
dim = 1280
margin = 0.5
SMALL_SIZES = {"batch_size": 5, "dim": 3}


def get_inputs():
    anchor = torch.randn(batch_size, dim)
    positive = anchor + 0.5 * torch.randn(batch_size, dim)
    negative = torch.randn(batch_size, dim)
    return [anchor, positive, negative]


def get_init_inputs():
    return [margin]
