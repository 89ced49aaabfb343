"""Model code nobody here wrote: ``timm`` and Hugging Face ``transformers`` models built from their configs
with random weights (never downloaded). Both packages are optional extras: the registry lists these entries
only when they are installed (``benchmarks.models.available``)."""

from __future__ import annotations

import functools

import torch
from torch import nn


@functools.cache
def torchvision_importable() -> None:
    """Make ``import torchvision`` work where its compiled ops cannot load (a CUDA build of torchvision beside a
    CPU-only torch: ``libc10_cuda.so`` is missing). Its Python modules still import, except that it registers
    fake kernels for ``torchvision::nms`` and ``qnms`` without checking that the ops exist; declaring their
    schemas (no kernel: calling them raises) lets it import. timm needs torchvision's Python code (transforms,
    ``FrozenBatchNorm2d``) and transformers imports it when installed; neither model here calls either op."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        return
    so = next(iter(importlib.util.find_spec("torchvision").submodule_search_locations), "")
    try:
        torch.ops.load_library(f"{so}/_C.so")
    except (OSError, RuntimeError):
        lib = torch.library.Library("torchvision", "DEF")  # noqa: TOR901 - schemas only, kept for the process
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _KEEP.append(lib)


_KEEP: list = []

TIMM = {
    "resnet18": {"small": {"model_name": "resnet18", "num_classes": 10},
                 "real": {"model_name": "resnet18", "num_classes": 1000}},
    "vit": {"small": {"model_name": "vit_tiny_patch16_224", "img_size": 16, "patch_size": 4, "embed_dim": 32, "depth": 2,
                      "num_heads": 4, "num_classes": 10},
            "real": {"model_name": "vit_base_patch16_224", "num_classes": 1000}},
    "convnext": {"small": {"model_name": "convnext_atto", "dims": (8, 16, 32, 64), "depths": (1, 1, 1, 1), "num_classes": 10},
                 "real": {"model_name": "convnext_tiny", "num_classes": 1000}},
}


def timm_model(which: str, config: str) -> nn.Module:
    torchvision_importable()
    import timm

    kwargs = dict(TIMM[which][config])
    return timm.create_model(kwargs.pop("model_name"), pretrained=False, **kwargs)


HF_LLAMA = {"small": {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
                      "num_hidden_layers": 1, "vocab_size": 64},
            "real": {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                     "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 4096}}
HF_BERT = {"small": {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64, "num_hidden_layers": 1,
                     "vocab_size": 64, "max_position_embeddings": 64},
           "real": {}}  # BertConfig()'s defaults are bert-base-uncased's sizes
HF_GPT2 = {"small": {"n_embd": 32, "n_head": 4, "n_layer": 1, "vocab_size": 64, "n_positions": 64, "bos_token_id": 0,
                     "eos_token_id": 0},
           "real": {}}  # GPT2Config()'s defaults are GPT-2 small's sizes


def hf_llama(config: str) -> nn.Module:
    torchvision_importable()
    from transformers import LlamaConfig, LlamaModel

    return LlamaModel(LlamaConfig(use_cache=False, **HF_LLAMA[config]))


def hf_bert(config: str) -> nn.Module:
    torchvision_importable()
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(**HF_BERT[config]))


def hf_gpt2(config: str) -> nn.Module:
    torchvision_importable()
    from transformers import GPT2Config, GPT2Model

    return GPT2Model(GPT2Config(use_cache=False, **HF_GPT2[config]))
