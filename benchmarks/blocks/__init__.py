"""The transformer-block corpus of issue 51: the blocks real models repeat, in bfloat16, each at a prefill size
(about 2048 tokens) and a decode-like size (16 tokens or fewer), built with the corpus machinery of
:mod:`benchmarks.models` (seeded random weights, norms away from the identity, a ``small`` config for CPU tests
and a ``real`` one at published sizes)::

    from benchmarks.blocks import BLOCKS
    spec = BLOCKS["llama7b_prefill"]
    model, args = spec.build("real"), spec.inputs("real", 0)

| block | hidden | heads (kv) | MLP | prefill | decode-like |
|---|---:|---:|---|---|---|
| ``llama7b`` (Llama-2-7B layer) | 4096 | 32 (32) | SwiGLU 11008 | 1 x 2048 tokens | 1 x 16 |
| ``llama1b`` (Llama-3.2-1B layer) | 2048 | 32 (8) | SwiGLU 8192 | 1 x 2048 | 1 x 16 |
| ``gpt2`` (GPT-2 small block) | 768 | 12 | GELU 3072 | 1 x 2048 | 1 x 16 |
| ``bert`` (BERT-base layer, padding mask) | 768 | 12 | GELU 3072 | 4 x 512 | 1 x 16 |
| ``vit_b`` (ViT-B/16 encoder block) | 768 | 12 | GELU 3072 | 10 images x 197 | 1 image x 197 |
| ``mixtral_expert`` (one Mixtral-8x7B expert, routed tokens) | 4096 | - | SwiGLU 14336 | 512 tokens | 4 tokens |

The Mixtral expert's token counts are one expert's share of a top-2-of-8 batch (2048 x 2 / 8 and 16 x 2 / 8).
``benchmarks/models.py --corpus blocks`` builds, measures and reports them like the model corpus.
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.models import ModelSpec, PaddingMask, Randn, bert, gpt2, llama, register, vit

from . import mixtral

BLOCKS: dict[str, ModelSpec] = {}
"""Every block at each of its sizes, by name (``<block>_prefill``, ``<block>_decode``)."""

BF16 = torch.bfloat16


def _block(name: str, family: str, make: Any, small: dict[str, Any], real: dict[str, Any],
           inputs: dict[str, tuple[list[Any], list[Any], list[Any]]], description: str) -> None:
    """``<name>_prefill`` and ``<name>_decode``: the same module, its ``real`` inputs at the two sizes
    (``inputs[size] = (small inputs, real inputs)``)."""
    for size, (small_in, real_in) in inputs.items():
        register(f"{name}_{size}", family, make, {"small": small, "real": real},
                 {"small": [Randn(i) if isinstance(i, tuple) else i for i in small_in],
                  "real": [Randn(i) if isinstance(i, tuple) else i for i in real_in]},
                 f"{description} ({size})", dtype=BF16, into=BLOCKS)


_block("llama7b", "llama", llama.LlamaDecoderLayer,
       dict(hidden_size=32, num_heads=4, num_key_value_heads=4, intermediate_size=64),
       dict(hidden_size=4096, num_heads=32, num_key_value_heads=32, intermediate_size=11008),
       {"prefill": ([(1, 8, 32)], [(1, 2048, 4096)]), "decode": ([(1, 3, 32)], [(1, 16, 4096)])},
       "Llama-2-7B decoder layer: fp32 RMSNorm, RoPE, 32 heads, SDPA causal, SwiGLU 11008")
_block("llama1b", "llama", llama.LlamaDecoderLayer,
       dict(hidden_size=32, num_heads=4, num_key_value_heads=2, intermediate_size=48),
       dict(hidden_size=2048, num_heads=32, num_key_value_heads=8, intermediate_size=8192),
       {"prefill": ([(1, 8, 32)], [(1, 2048, 2048)]), "decode": ([(1, 3, 32)], [(1, 16, 2048)])},
       "Llama-3.2-1B decoder layer: fp32 RMSNorm, RoPE, 32 heads on 8 kv heads, SDPA causal, SwiGLU 8192")
_block("gpt2", "gpt2", gpt2.Block,
       dict(n_embd=32, n_head=4, block_size=8), dict(n_embd=768, n_head=12, block_size=2048),
       {"prefill": ([(1, 8, 32)], [(1, 2048, 768)]), "decode": ([(1, 3, 32)], [(1, 16, 768)])},
       "GPT-2 small block: c_attn split, tril mask + masked_fill, softmax, tanh GELU by hand")
_block("bert", "bert", bert.BertLayer,
       dict(hidden_size=32, num_attention_heads=4, intermediate_size=64),
       dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072),
       {"prefill": ([(2, 8, 32), PaddingMask((2, 8))], [(4, 512, 768), PaddingMask((4, 512))]),
        "decode": ([(1, 3, 32), PaddingMask((1, 3))], [(1, 16, 768), PaddingMask((1, 16))])},
       "BERT-base encoder layer: q/k/v Linears, additive padding mask, post-norm, erf GELU")
_block("vit_b", "vit", vit.EncoderBlock,
       dict(dim=32, num_heads=4), dict(dim=768, num_heads=12),
       {"prefill": ([(2, 5, 32)], [(10, 197, 768)]), "decode": ([(1, 5, 32)], [(1, 197, 768)])},
       "ViT-B/16 encoder block: pre-norm, hand-written attention, GELU MLP")
_block("mixtral_expert", "mixtral", mixtral.MixtralExpertMLP,
       dict(hidden_size=32, intermediate_size=48), dict(hidden_size=4096, intermediate_size=14336),
       {"prefill": ([(7, 32), (7,)], [(512, 4096), (512,)]), "decode": ([(3, 32), (3,)], [(4, 4096), (4,)])},
       "Mixtral-8x7B expert: w2(silu(w1 x) * w3 x) scaled by each token's routing weight")
