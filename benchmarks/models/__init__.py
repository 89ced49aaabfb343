"""A corpus of PyTorch models in the forms people write them (issue 49): torchvision-style CNNs with in-place
ReLU and batch norm, dense and inception blocks, depthwise and grouped convolutions, ViT, Swin, GPT-2, Llama
and BERT blocks, recurrent cells, MLP-Mixer, a UNet, a diffusion ResBlock, MLPs, a NetVLAD head, attention
through SDPA and ``nn.TransformerEncoderLayer``; and, when the optional ``timm`` and ``transformers`` packages
are installed, models from those libraries built from their configs.

``MODELS`` maps a name to its :class:`ModelSpec`::

    from benchmarks.models import MODELS
    spec = MODELS["resnet_basic_stage"]
    model = spec.build("small")               # eval mode, seeded random weights, in spec.dtype
    args = spec.inputs("small", seed=0)       # a tuple of CPU tensors (floats in spec.dtype)
    out = model(*args)

Two configs per model: ``"small"`` (tensors of at most a few thousand elements: the tests run every model in
it on a CPU) and ``"real"`` (published sizes: ResNet-50 stages at 56x56, ViT-B, Llama-3-8B's layer, ...; for a
GPU benchmark: build it under ``torch.device("cuda")`` and move the inputs there). Weights are random and
seeded by the model's name, so two builds are equal; batch norm statistics and the affine parameters of
batch/group/layer norms are randomized too (away from the identity a fresh module has).

``OPTIONAL`` maps each third-party entry left out (its package is not installed) to the package it needs.
"""

from __future__ import annotations

import importlib.util
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from . import (
    attention,
    bert,
    convnext,
    densenet,
    diffusion,
    efficientnet,
    gpt2,
    heldout,
    heldout2,
    heldout3,
    inception,
    llama,
    mixer,
    mlp,
    mobilenet,
    netvlad,
    resnet,
    rnn,
    shufflenet,
    swin,
    tcn,
    third_party,
    unet,
    vgg,
    vit,
)

CONFIGS = ("small", "real")


@dataclass(frozen=True)
class ModelSpec:
    """One corpus model: ``build(config)`` gives the module (eval mode, random seeded weights, in ``dtype``),
    ``inputs(config, seed)`` the arguments of its ``forward``."""

    name: str
    family: str
    build: Callable[[str], nn.Module]
    inputs: Callable[[str, int], tuple[torch.Tensor, ...]]
    dtype: torch.dtype
    description: str
    source: str = "ours"  # "ours", or the package whose code it is: "timm", "transformers"


# The inputs of a model's forward, one descriptor each: random floats, a 0/1 padding mask, diffusion timesteps, token ids.

@dataclass(frozen=True)
class Randn:
    shape: tuple[int, ...]

    def make(self, g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(self.shape, generator=g).to(dtype)


@dataclass(frozen=True)
class PaddingMask:
    """``(batch, seq)``: ones, with the last quarter of every other sequence padded (zeros); floats in the
    model's dtype, or int64 (``integer``) as Hugging Face models take it."""

    shape: tuple[int, int]
    integer: bool = False

    def make(self, g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        mask = torch.ones(self.shape, dtype=torch.int64 if self.integer else dtype)
        mask[1::2, self.shape[1] - max(1, self.shape[1] // 4):] = 0
        return mask


@dataclass(frozen=True)
class Timesteps:
    shape: tuple[int, ...]

    def make(self, g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        return (torch.rand(self.shape, generator=g) * 1000).to(dtype)


@dataclass(frozen=True)
class TokenIds:
    shape: tuple[int, ...]
    vocab: int

    def make(self, g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        return torch.randint(0, self.vocab, self.shape, generator=g)


def randomize_norms(model: nn.Module) -> nn.Module:
    """Batch-norm running statistics and the affine parameters of batch, group and layer norms drawn away from
    a fresh module's identity (from the global RNG), so a test sees them."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.uniform_(0.5, 1.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.uniform_(-0.5, 0.5)
    return model


def _build(name: str, make: Callable[[str], nn.Module], dtype: torch.dtype, config: str) -> nn.Module:
    if config not in CONFIGS:
        raise ValueError(f"{name}: config {config!r} is not one of {CONFIGS}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(zlib.crc32(name.encode()))
        model = randomize_norms(make(config))
    return model.to(dtype).eval()


def _inputs(name: str, descriptors: dict[str, Sequence[Any]], dtype: torch.dtype, config: str,
            seed: int = 0) -> tuple[torch.Tensor, ...]:
    if config not in CONFIGS:
        raise ValueError(f"{name}: config {config!r} is not one of {CONFIGS}")
    g = torch.Generator().manual_seed(seed)
    return tuple(d.make(g, dtype) for d in descriptors[config])


MODELS: dict[str, ModelSpec] = {}
"""Every model whose packages are here, by name."""

OPTIONAL: dict[str, str] = {}
"""Third-party entries left out, each with the package it needs."""


def register(name: str, family: str, make: Callable[..., nn.Module], configs: dict[str, dict[str, Any]],
             inputs: dict[str, Sequence[Any]], description: str, dtype: torch.dtype = torch.float32,
             source: str = "ours", bf16: str | None = None, into: dict[str, ModelSpec] | None = None) -> None:
    """Add a model to ``into`` (default ``MODELS``): ``make(**configs[config])`` builds it, ``inputs[config]``
    describes its arguments. ``bf16``: the description of the same model in bfloat16, registered as
    ``<name>_bf16``."""
    into = MODELS if into is None else into
    assert name not in into and set(configs) == set(inputs) == set(CONFIGS), name

    def made(config: str) -> nn.Module:
        return make(**configs[config])

    into[name] = ModelSpec(name, family, partial(_build, name, made, dtype), partial(_inputs, name, inputs, dtype),
                           dtype, description, source)
    if bf16 is not None:
        register(f"{name}_bf16", family, make, configs, inputs, bf16, torch.bfloat16, source, into=into)


def _both(shapes_small: Sequence[Any], shapes_real: Sequence[Any]) -> dict[str, Sequence[Any]]:
    """Input descriptors per config (a bare shape is :class:`Randn`)."""
    def described(items: Sequence[Any]) -> list[Any]:
        return [Randn(tuple(i)) if isinstance(i, tuple) else i for i in items]

    return {"small": described(shapes_small), "real": described(shapes_real)}


F32, BF16 = torch.float32, torch.bfloat16

# --- CNNs --------------------------------------------------------------------------------------------------------

register("resnet_basic_stage", "resnet", partial(resnet.ResNetStage, resnet.BasicBlock),
         {"small": dict(inplanes=4, planes=8, blocks=2, stride=2), "real": dict(inplanes=64, planes=128, blocks=2, stride=2)},
         _both([(2, 4, 8, 8)], [(32, 64, 56, 56)]),
         "ResNet-18 layer2: two basic blocks (3x3 conv, BN, in-place ReLU, in-place residual add), a projection shortcut")
register("resnet_bottleneck_stage", "resnet", partial(resnet.ResNetStage, resnet.Bottleneck),
         {"small": dict(inplanes=8, planes=4, blocks=2, stride=2), "real": dict(inplanes=256, planes=128, blocks=4, stride=2)},
         _both([(2, 8, 8, 8)], [(32, 256, 56, 56)]),
         "ResNet-50 layer2: bottleneck blocks (1x1, 3x3 strided, 1x1 x4), BN, in-place ReLU, projection shortcut")
register("resnet_stem", "resnet", resnet.ResNetStem,
         {"small": dict(in_channels=3, width=8), "real": dict(in_channels=3, width=64)},
         _both([(2, 3, 16, 16)], [(32, 3, 224, 224)]),
         "ResNet stem: 7x7 stride-2 conv, BN, in-place ReLU, 3x3 stride-2 max pool")
register("vgg_stack", "vgg", vgg.VGG,
         {"small": dict(cfg=[8, "M", 16, 16, "M"], in_channels=3, hidden=32, num_classes=10, pool=2),
          "real": dict(cfg=[64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
                       in_channels=3, hidden=4096, num_classes=1000, pool=7)},
         _both([(2, 3, 8, 8)], [(16, 3, 224, 224)]),
         "VGG-16-BN from a layer list: 3x3 convs, BN, in-place ReLU, max pools, adaptive avg pool, dropout MLP head")
register("densenet_block", "densenet", densenet.DenseStage,
         {"small": dict(num_layers=8, num_input_features=8, growth_rate=4, bn_size=2),
          "real": dict(num_layers=12, num_input_features=128, growth_rate=32, bn_size=4)},
         _both([(2, 8, 8, 8)], [(32, 128, 28, 28)]),
         "DenseNet dense block (each layer concatenates all earlier maps; the block ends in a cat of 9+ maps), transition")
register("inception_block", "inception", inception.Inception,
         {"small": dict(in_channels=8, ch1x1=4, ch3x3red=4, ch3x3=8, ch5x5red=2, ch5x5=4, pool_proj=4),
          "real": dict(in_channels=192, ch1x1=64, ch3x3red=96, ch3x3=128, ch5x5red=16, ch5x5=32, pool_proj=32)},
         _both([(2, 8, 8, 8)], [(32, 192, 28, 28)]),
         "GoogLeNet inception 3a: four parallel conv/BN/ReLU branches (1x1, 3x3, double 3x3, pool+1x1) concatenated")
register("mobilenetv2_stage", "mobilenet", mobilenet.InvertedResidualStack,
         {"small": dict(inp=4, oup=8, n=2, stride=2, expand_ratio=6),
          "real": dict(inp=24, oup=32, n=3, stride=2, expand_ratio=6)},
         _both([(2, 4, 8, 8)], [(32, 24, 56, 56)]),
         "MobileNetV2 inverted residuals: 1x1 expand, 3x3 depthwise, linear 1x1 project, BN, ReLU6, residual")
register("shufflenetv2_stage", "shufflenet", shufflenet.ShuffleStage,
         {"small": dict(inp=8, oup=16, repeats=1), "real": dict(inp=24, oup=116, repeats=3)},
         _both([(2, 8, 8, 8)], [(32, 24, 56, 56)]),
         "ShuffleNetV2 stage: channel split (chunk), depthwise branches, cat, channel shuffle (view/transpose/view)")
register("shufflenet_v1_unit", "shufflenet", shufflenet.GroupedConvShuffle,
         {"small": dict(channels=16, groups=2), "real": dict(channels=240, groups=3)},
         _both([(2, 16, 8, 8)], [(32, 240, 28, 28)]),
         "ShuffleNet v1 unit: grouped 1x1 convs around a channel shuffle and a depthwise 3x3, residual")
register("efficientnet_mbconv", "efficientnet", efficientnet.MBConvStage,
         {"small": dict(in_ch=8, out_ch=8, layers=2, expand_ratio=4, kernel=3, stride=2),
          "real": dict(in_ch=24, out_ch=40, layers=2, expand_ratio=6, kernel=5, stride=2)},
         _both([(2, 8, 8, 8)], [(32, 24, 56, 56)]),
         "EfficientNet MBConv: 1x1 expand, depthwise conv, squeeze-excitation (pool, 1x1s, SiLU, sigmoid gate), project")
register("convnext_stage", "convnext", convnext.ConvNeXtStage,
         {"small": dict(in_dim=8, dim=16, depth=2), "real": dict(in_dim=96, dim=192, depth=3)},
         _both([(2, 8, 8, 8)], [(32, 96, 56, 56)]),
         "ConvNeXt stage: hand-written channels-first LayerNorm, 2x2 downsampling, blocks (7x7 depthwise, permute, LN, MLP)")
register("unet_convtranspose", "unet", partial(unet.UNet, bilinear=False),
         {"small": dict(n_channels=3, n_classes=2, base=4, depth=2), "real": dict(n_channels=3, n_classes=2, base=64, depth=4)},
         _both([(2, 3, 16, 16)], [(4, 3, 256, 256)]),
         "UNet: double convs, max-pool downs, ConvTranspose2d ups, F.pad to the skip, torch.cat skips")
register("unet_interpolate", "unet", partial(unet.UNet, bilinear=True),
         {"small": dict(n_channels=3, n_classes=2, base=4, depth=2), "real": dict(n_channels=3, n_classes=2, base=64, depth=4)},
         _both([(2, 3, 16, 16)], [(4, 3, 256, 256)]),
         "UNet with bilinear nn.Upsample (align_corners) ups instead of transposed convs")
register("diffusion_resblock", "diffusion", diffusion.TimeConditionedResBlock,
         {"small": dict(in_channels=8, out_channels=16, model_channels=8, groups=4),
          "real": dict(in_channels=320, out_channels=640, model_channels=320, groups=32)},
         _both([(2, 8, 8, 8), Timesteps((2,))], [(2, 320, 64, 64), Timesteps((2,))]),
         "Diffusion UNet ResBlock: GroupNorm, SiLU, convs, a sinusoidal timestep embedding MLP added per channel")
register("netvlad_head", "netvlad", netvlad.EmbedNetVLAD,
         {"small": dict(in_chans=3, dim=8, num_clusters=4), "real": dict(in_chans=256, dim=512, num_clusters=64)},
         _both([(2, 3, 8, 8)], [(4, 256, 30, 40)]),
         "NetVLAD pooling: soft-assignment conv, softmax, centroid residuals (expand/permute, in-place *=), L2 normalizations")
register("tcn", "tcn", tcn.TemporalConvNet,
         {"small": dict(num_inputs=4, num_channels=[8, 8, 8], kernel_size=2),
          "real": dict(num_inputs=64, num_channels=[256] * 8, kernel_size=3)},
         _both([(2, 4, 32)], [(16, 64, 1024)]),
         "Temporal conv net: dilated causal Conv1d (pad, chomp), ReLU, dropout, 1x1 residual convs")

# --- Transformers --------------------------------------------------------------------------------------------------

register("vit_block", "vit", vit.EncoderBlock,
         {"small": dict(dim=32, num_heads=4), "real": dict(dim=768, num_heads=12)},
         _both([(2, 8, 32)], [(32, 197, 768)]),
         "ViT-B encoder block: pre-norm, hand-written attention (qkv Linear, reshape/permute, q@k^T, softmax), GELU MLP",
         bf16="The ViT encoder block in bfloat16")
register("vit_tiny", "vit", vit.PatchEmbedEncoder,
         {"small": dict(img_size=16, patch_size=4, in_chans=3, dim=32, depth=2, num_heads=4, num_classes=10),
          "real": dict(img_size=224, patch_size=16, in_chans=3, dim=768, depth=12, num_heads=12, num_classes=1000)},
         _both([(2, 3, 16, 16)], [(16, 3, 224, 224)]),
         "ViT: conv patch embedding, class token (expand, cat), position embedding, encoder blocks, LN, head")
register("swin_block_pair", "swin", swin.SwinPair,
         {"small": dict(dim=16, input_resolution=8, num_heads=2, window_size=4),
          "real": dict(dim=96, input_resolution=56, num_heads=3, window_size=7)},
         _both([(2, 64, 16)], [(16, 3136, 96)]),
         "Swin-T stage-1 block pair: window partition, relative position bias (table index), torch.roll shift, mask")
register("gpt2_block", "gpt2", gpt2.Block,
         {"small": dict(n_embd=32, n_head=4, block_size=8), "real": dict(n_embd=768, n_head=12, block_size=1024)},
         _both([(2, 8, 32)], [(8, 1024, 768)]),
         "GPT-2 block (nanoGPT style): c_attn split, tril mask buffer + masked_fill(-inf), softmax, tanh GELU by hand",
         bf16="The GPT-2 block in bfloat16")
register("llama_block", "llama", llama.LlamaDecoderLayer,
         {"small": dict(hidden_size=32, num_heads=4, num_key_value_heads=2, intermediate_size=64),
          "real": dict(hidden_size=4096, num_heads=32, num_key_value_heads=8, intermediate_size=14336)},
         _both([(2, 8, 32)], [(1, 2048, 4096)]),
         "Llama-3-8B decoder layer (HF style): fp32 RMSNorm, RoPE from position ids, GQA via expand, SDPA causal, SwiGLU",
         bf16="The Llama decoder layer in bfloat16 (RMSNorm upcasts to float32 and back)")
register("bert_layer", "bert", bert.BertLayer,
         {"small": dict(hidden_size=32, num_attention_heads=4, intermediate_size=64),
          "real": dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072)},
         _both([(2, 8, 32), PaddingMask((2, 8))], [(32, 128, 768), PaddingMask((32, 128))]),
         "BERT-base encoder layer: q/k/v Linears, transpose_for_scores, additive padding mask, post-norm, erf GELU")
register("causal_sdpa_block", "attention", attention.CausalAttentionBlock,
         {"small": dict(dim=32, n_heads=4), "real": dict(dim=1024, n_heads=16)},
         _both([(2, 8, 32)], [(8, 1024, 1024)]),
         "Causal attention block: fused qkv Linear + chunk, scaled_dot_product_attention(is_causal), tanh-GELU MLP",
         bf16="The causal SDPA block in bfloat16")
register("torch_transformer_encoder", "attention", attention.TorchEncoder,
         {"small": dict(d_model=32, nhead=4, dim_feedforward=64, num_layers=2),
          "real": dict(d_model=512, nhead=8, dim_feedforward=2048, num_layers=6)},
         _both([(2, 8, 32)], [(32, 128, 512)]),
         "nn.TransformerEncoder of nn.TransformerEncoderLayer (batch_first, norm_first, GELU), nn.MultiheadAttention inside")
register("mixer_block", "mixer", mixer.MixerBlock,
         {"small": dict(num_patches=16, dim=32, tokens_mlp_dim=16, channels_mlp_dim=64),
          "real": dict(num_patches=196, dim=768, tokens_mlp_dim=384, channels_mlp_dim=3072)},
         _both([(2, 16, 32)], [(32, 196, 768)]),
         "MLP-Mixer-B/16 block: token-mixing MLP across patches (transpose, Linear, GELU), channel-mixing MLP")
register("mixer_tiny", "mixer", mixer.Mixer,
         {"small": dict(img_size=16, patch=4, in_chans=3, dim=32, depth=2, tokens_mlp_dim=16, channels_mlp_dim=64,
                        num_classes=10),
          "real": dict(img_size=224, patch=16, in_chans=3, dim=768, depth=12, tokens_mlp_dim=384, channels_mlp_dim=3072,
                       num_classes=1000)},
         _both([(2, 3, 16, 16)], [(16, 3, 224, 224)]),
         "MLP-Mixer: conv patch stem, flatten/transpose, mixer blocks, LN, mean pooling, head")

# --- Recurrent cells and MLPs -----------------------------------------------------------------------------------------

register("lstm_cell", "rnn", rnn.LSTMCell,
         {"small": dict(input_size=16, hidden_size=32), "real": dict(input_size=1024, hidden_size=1024)},
         _both([(2, 16), (2, 32), (2, 32)], [(64, 1024), (64, 1024), (64, 1024)]),
         "One LSTM step from two Linears: gates chunked in four, sigmoid/tanh, (h, c) returned")
register("lstm_unrolled", "rnn", rnn.UnrolledLSTM,
         {"small": dict(input_size=8, hidden_size=16), "real": dict(input_size=512, hidden_size=1024)},
         _both([(8, 2, 8)], [(64, 32, 512)]),
         "The hand-written LSTM cell unrolled by a Python loop over 8 steps from zeros, hidden states stacked")
register("gru_cell", "rnn", rnn.GRUCell,
         {"small": dict(input_size=16, hidden_size=32), "real": dict(input_size=1024, hidden_size=1024)},
         _both([(2, 16), (2, 32)], [(64, 1024), (64, 1024)]),
         "One GRU step from two Linears: reset, update and new gates")
register("gru_unrolled", "rnn", rnn.GRUStep,
         {"small": dict(input_size=16, hidden_size=32, out_size=8), "real": dict(input_size=512, hidden_size=1024, out_size=256)},
         _both([(2, 4, 16), (2, 32)], [(32, 16, 512), (32, 1024)]),
         "The hand-written GRU cell over 4 steps (a Python loop), a Linear head on the last state")
register("lstmcell_decoder", "rnn", rnn.LSTMCellDecoder,
         {"small": dict(input_size=16, hidden_size=32, out_size=8), "real": dict(input_size=512, hidden_size=1024, out_size=512)},
         _both([(2, 4, 16), (2, 32), (2, 32)], [(32, 16, 512), (32, 1024), (32, 1024)]),
         "nn.LSTMCell over 4 steps (a Python loop), a Linear on each step's h, stacked")
register("wide_mlp", "mlp", mlp.WideMLP,
         {"small": dict(in_features=32, hidden=64, out_features=10, layers=3),
          "real": dict(in_features=1024, hidden=8192, out_features=1000, layers=4)},
         _both([(8, 32)], [(2048, 1024)]),
         "A plain wide MLP: (Linear, LayerNorm, ReLU, dropout) x3, a Linear head")

# --- Written after the rest, before anything was tuned for them (heldout.py) ---------------------------------------------

register("t5_layer", "t5", heldout.T5Layer,
         {"small": dict(dim=32, heads=4, ff=64, seq=8), "real": dict(dim=768, heads=12, ff=3072, seq=512)},
         _both([(2, 8, 32)], [(8, 512, 768)]),
         "T5-base encoder layer: RMSNorm without a mean, relative position bias added to written-out softmax "
         "attention, ReLU feed-forward, no biases")
register("se_resnet_stage", "resnet", heldout.SEStage,
         {"small": dict(channels=8, blocks=2), "real": dict(channels=128, blocks=2)},
         _both([(2, 8, 8, 8)], [(32, 128, 28, 28)]),
         "Two ResNet basic blocks with squeeze-excitation (pool, 1x1 convs, sigmoid scale), in-place ReLU and +=")
register("convnextv2_block", "convnext", heldout.ConvNeXtV2Block,
         {"small": dict(dim=8), "real": dict(dim=192)},
         _both([(2, 8, 8, 8)], [(32, 192, 28, 28)]),
         "ConvNeXt-V2 block: depthwise 7x7, channels-last LayerNorm, GELU MLP with global response normalization")
register("wavenet_stack", "tcn", heldout.WaveNetStack,
         {"small": dict(channels=8, layers=3), "real": dict(channels=64, layers=8)},
         _both([(2, 8, 32)], [(16, 64, 4096)]),
         "WaveNet residual stack: dilated causal conv1d (padded, tail sliced), tanh*sigmoid gate via chunk, "
         "residual and skip 1x1 convs")
register("neox_layer", "gpt2", heldout.NeoXLayer,
         {"small": dict(dim=32, heads=4, seq=8), "real": dict(dim=1024, heads=16, seq=512)},
         _both([(2, 8, 32)], [(4, 512, 1024)]),
         "GPT-NeoX layer: parallel attention and MLP residuals, fused qkv split per head, partial rotary, causal SDPA",
         bf16="The GPT-NeoX layer in bfloat16")
register("subpixel_upsampler", "unet", heldout.SubPixelUpsampler,
         {"small": dict(channels=4), "real": dict(channels=64)},
         _both([(2, 4, 8, 8)], [(16, 64, 64, 64)]),
         "ESPCN-style x2 upsampler: conv to 4x channels, pixel_shuffle, PReLU, conv")

# --- A second set written before anything was tuned for them (heldout2.py) ---------------------------------------------

register("mbconv_v3", "mobilenet", heldout2.MBConvV3,
         {"small": dict(channels=8, expand=4), "real": dict(channels=40, expand=6)},
         _both([(2, 8, 9, 9)], [(32, 40, 28, 28)]),
         "MobileNetV3 block: hardswish, depthwise 5x5, squeeze-excitation with hardsigmoid, residual")
register("gated_decoder", "gan", heldout2.GatedDecoder,
         {"small": dict(channels=8), "real": dict(channels=64)},
         _both([(2, 8, 5, 7)], [(16, 64, 64, 64)]),
         "GAN upsampling step: transposed conv x2, GLU, instance norm, leaky ReLU, conv to RGB, tanh")
register("textcnn", "text", heldout2.TextCNN,
         {"small": dict(vocab=50, dim=16, filters=8, classes=5), "real": dict(vocab=30000, dim=300, filters=100, classes=20)},
         {"small": [TokenIds((3, 11), 50)], "real": [TokenIds((64, 256), 30000)]},
         "TextCNN: embedding, conv1d widths 2/3/4, max over time, concat, linear, log-softmax")
register("shifted_window", "swin", heldout2.ShiftedWindowAttention,
         {"small": dict(dim=16, heads=2, window=4), "real": dict(dim=128, heads=4, window=7)},
         _both([(2, 8, 8, 16)], [(16, 56, 56, 128)]),
         "Swin shifted windows on [B, H, W, C]: roll, window partition, qkv unbind, attention, unpartition, roll back")
register("dense_moe", "moe", heldout2.DenseMoE,
         {"small": dict(dim=16, ff=32, experts=4), "real": dict(dim=512, ff=1024, experts=8)},
         _both([(2, 5, 16)], [(8, 256, 512)]),
         "Dense top-2 mixture of experts: topk router, scatter into gates, expert MLPs by einsum, gated sum")
register("lstm_classifier", "rnn", heldout2.LSTMClassifier,
         {"small": dict(features=8, hidden=16, classes=3), "real": dict(features=128, hidden=512, classes=10)},
         _both([(2, 7, 8)], [(64, 100, 128)]),
         "nn.LSTM (2 layers, batch first) classifier: last step plus final hidden state, LayerNorm, linear")

# --- A third set written before anything was tuned for them (heldout3.py) ----------------------------------------------

register("convlstm_cell", "rnn", heldout3.ConvLSTMCell,
         {"small": dict(channels=4, hidden=8), "real": dict(channels=64, hidden=64)},
         _both([(2, 4, 6, 6), (2, 8, 6, 6), (2, 8, 6, 6)], [(16, 64, 64, 64), (16, 64, 64, 64), (16, 64, 64, 64)]),
         "ConvLSTM step: 3x3 conv over cat(x, h), chunk into four gates, the LSTM update of c and h")
register("pointnet_encoder", "pointnet", heldout3.PointNetEncoder,
         {"small": dict(width=32, out=5), "real": dict(width=1024, out=40)},
         _both([(3, 3, 17)], [(32, 3, 2048)]),
         "PointNet encoder: 1x1 conv1d + BatchNorm1d + ReLU to 1024 wide, max over points, view, linear + BN1d head")
register("conformer_conv", "conformer", heldout3.ConformerConv,
         {"small": dict(dim=8), "real": dict(dim=256)},
         _both([(2, 37, 8)], [(16, 512, 256)]),
         "Conformer conv module: LayerNorm, pointwise conv, GLU, depthwise conv1d width 31, BatchNorm1d, SiLU, residual")
register("alibi_attention", "attention", heldout3.ALiBiAttention,
         {"small": dict(dim=16, heads=2), "real": dict(dim=768, heads=12)},
         _both([(2, 7, 16)], [(8, 512, 768)]),
         "Causal attention with ALiBi biases and a triu mask built in forward, einsum scores, masked_fill, softmax")
register("gqa_block", "llama", heldout3.GQABlock,
         {"small": dict(dim=32, heads=4, kv_heads=2, max_len=16), "real": dict(dim=2048, heads=16, kv_heads=4, max_len=2048)},
         _both([(2, 9, 32)], [(4, 1024, 2048)]),
         "Grouped-query attention half-block: nn.RMSNorm, q/k/v Linears, rotate-half RoPE, repeat_interleave, causal SDPA",
         bf16="The grouped-query attention half-block in bfloat16")
register("yolo_neck", "yolo", heldout3.YoloNeck,
         {"small": dict(deep=8, skip=4, outs=7), "real": dict(deep=512, skip=256, outs=255)},
         _both([(2, 8, 3, 5), (2, 4, 6, 10)], [(16, 512, 20, 20), (16, 256, 40, 40)]),
         "YOLOv3 neck step: conv-BN-LeakyReLU in place, nearest x2 Upsample, concat with the skip, sigmoid on 4 channels")
register("regnety_block", "regnet", heldout3.RegNetYBlock,
         {"small": dict(cin=8, cout=16), "real": dict(cin=64, cout=128)},
         _both([(2, 8, 9, 9)], [(32, 64, 56, 56)]),
         "RegNetY block: grouped 3x3 conv stride 2, squeeze-excitation by mean(keepdim), projection shortcut, in-place ReLU")
register("deit_tokens", "vit", heldout3.DeiTTokens,
         {"small": dict(dim=16, heads=2, image=32, classes=5), "real": dict(dim=384, heads=6, image=224, classes=1000)},
         _both([(2, 3, 32, 32)], [(16, 3, 224, 224)]),
         "DeiT-S tokens: patch conv, class and distillation tokens expanded and concatenated, a norm-first encoder layer")
register("perceiver_cross", "attention", heldout3.PerceiverCross,
         {"small": dict(latents=4, dim=16, kv_dim=8, heads=2), "real": dict(latents=256, dim=512, kv_dim=256, heads=8)},
         {"small": [Randn((2, 9, 8)), PaddingMask((2, 9))], "real": [Randn((8, 2048, 256)), PaddingMask((8, 2048))]},
         "Perceiver cross-attention: latents expanded over the batch, nn.MultiheadAttention with a key padding mask")

# --- Third-party model code (optional packages) ----------------------------------------------------------------------

_TIMM = importlib.util.find_spec("timm") is not None and importlib.util.find_spec("torchvision") is not None
_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


def _third_party(name: str, family: str, package: str, here: bool, make: Callable[..., nn.Module],
                 inputs: dict[str, Sequence[Any]], description: str, dtype: torch.dtype = F32) -> None:
    if not here:
        OPTIONAL[name] = package
        return
    register(name, family, make, {c: {"config": c} for c in CONFIGS}, inputs, description, dtype, source=package)


_third_party("timm_resnet18", "resnet", "timm", _TIMM, partial(third_party.timm_model, "resnet18"),
             _both([(2, 3, 16, 16)], [(32, 3, 224, 224)]), "timm.create_model('resnet18', num_classes=10)")
_third_party("timm_vit", "vit", "timm", _TIMM, partial(third_party.timm_model, "vit"),
             _both([(2, 3, 16, 16)], [(16, 3, 224, 224)]),
             "timm ViT: vit_tiny_patch16_224 at img 16, patch 4, dim 32, depth 2 (real: vit_base_patch16_224)")
_third_party("timm_convnext", "convnext", "timm", _TIMM, partial(third_party.timm_model, "convnext"),
             _both([(2, 3, 32, 32)], [(32, 3, 224, 224)]),
             "timm ConvNeXt: convnext_atto with dims 8..64, one block a stage (real: convnext_tiny)")
_third_party("hf_llama", "llama", "transformers", _TRANSFORMERS, third_party.hf_llama,
             _both([TokenIds((2, 8), 64)], [TokenIds((1, 2048), 32000)]),
             "transformers LlamaModel(LlamaConfig(hidden 32, 4 heads, 2 kv heads, 1 layer)) (real: 4096 hidden, 2 layers)")
_third_party("hf_llama_bf16", "llama", "transformers", _TRANSFORMERS, third_party.hf_llama,
             _both([TokenIds((2, 8), 64)], [TokenIds((1, 2048), 32000)]), "The transformers LlamaModel in bfloat16", BF16)
_third_party("hf_bert", "bert", "transformers", _TRANSFORMERS, third_party.hf_bert,
             _both([TokenIds((2, 8), 64), PaddingMask((2, 8), integer=True)],
                   [TokenIds((32, 128), 30522), PaddingMask((32, 128), integer=True)]),
             "transformers BertModel(BertConfig(hidden 32, 4 heads, 1 layer)) with a padding mask (real: bert-base)")
_third_party("hf_gpt2", "gpt2", "transformers", _TRANSFORMERS, third_party.hf_gpt2,
             _both([TokenIds((2, 8), 64)], [TokenIds((8, 1024), 50257)]),
             "transformers GPT2Model(GPT2Config(n_embd 32, 4 heads, 1 layer)) (real: GPT-2 small)")

__all__ = ["CONFIGS", "MODELS", "OPTIONAL", "ModelSpec", "PaddingMask", "Randn", "TokenIds", "Timesteps", "randomize_norms",
           "register"]
