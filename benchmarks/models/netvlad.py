"""A NetVLAD pooling head (place recognition): L2-normalized local descriptors, a 1x1 conv soft-assignment to
K clusters (softmax), residuals to the learned centroids weighted by the assignment (``expand``/``permute``,
an in-place ``*=``), summed, intra-normalized, flattened and L2-normalized."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class NetVLAD(nn.Module):
    def __init__(self, num_clusters: int = 64, dim: int = 128, alpha: float = 100.0, normalize_input: bool = True):
        super().__init__()
        self.num_clusters = num_clusters
        self.dim = dim
        self.alpha = alpha
        self.normalize_input = normalize_input
        self.conv = nn.Conv2d(dim, num_clusters, kernel_size=(1, 1), bias=True)
        self.centroids = nn.Parameter(torch.rand(num_clusters, dim))
        self.conv.weight = nn.Parameter((2.0 * self.alpha * self.centroids).unsqueeze(-1).unsqueeze(-1))
        self.conv.bias = nn.Parameter(-self.alpha * self.centroids.norm(dim=1))

    def forward(self, x):
        N, C = x.shape[:2]
        if self.normalize_input:
            x = F.normalize(x, p=2, dim=1)
        soft_assign = self.conv(x).view(N, self.num_clusters, -1)
        soft_assign = F.softmax(soft_assign, dim=1)
        x_flatten = x.view(N, C, -1)
        residual = x_flatten.expand(self.num_clusters, -1, -1, -1).permute(1, 0, 2, 3) - \
            self.centroids.expand(x_flatten.size(-1), -1, -1).permute(1, 2, 0).unsqueeze(0)
        residual *= soft_assign.unsqueeze(2)
        vlad = residual.sum(dim=-1)
        vlad = F.normalize(vlad, p=2, dim=2)
        vlad = vlad.view(x.size(0), -1)
        vlad = F.normalize(vlad, p=2, dim=1)
        return vlad


class EmbedNetVLAD(nn.Module):
    """A small conv backbone (conv, batch norm, ReLU) and the NetVLAD head, as the head is trained."""

    def __init__(self, in_chans: int, dim: int, num_clusters: int):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(in_chans, dim, 3, padding=1, bias=False), nn.BatchNorm2d(dim),
                                      nn.ReLU(inplace=True))
        self.pool = NetVLAD(num_clusters=num_clusters, dim=dim, alpha=1.0)

    def forward(self, x):
        return self.pool(self.backbone(x))
