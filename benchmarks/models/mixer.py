"""An MLP-Mixer block: a token-mixing MLP applied across patches (``transpose``, Linear, GELU, Linear,
``transpose`` back) and a channel-mixing MLP, each pre-norm with a residual; a patch stem in front and
global average pooling and a head behind."""

from __future__ import annotations

from torch import nn


class MlpBlock(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.gelu(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self, num_patches: int, dim: int, tokens_mlp_dim: int, channels_mlp_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mixing = MlpBlock(num_patches, tokens_mlp_dim)
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mixing = MlpBlock(dim, channels_mlp_dim)

    def forward(self, x):
        y = self.norm1(x)
        y = y.transpose(1, 2)
        y = self.token_mixing(y)
        y = y.transpose(1, 2)
        x = x + y
        y = self.norm2(x)
        return x + self.channel_mixing(y)


class Mixer(nn.Module):
    def __init__(self, img_size: int, patch: int, in_chans: int, dim: int, depth: int, tokens_mlp_dim: int,
                 channels_mlp_dim: int, num_classes: int):
        super().__init__()
        num_patches = (img_size // patch) ** 2
        self.stem = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        self.blocks = nn.Sequential(*[MixerBlock(num_patches, dim, tokens_mlp_dim, channels_mlp_dim)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = x.flatten(2).transpose(1, 2)
        x = self.blocks(x)
        x = self.norm(x)
        x = x.mean(dim=1)
        return self.head(x)
