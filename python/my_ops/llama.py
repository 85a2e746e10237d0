"""A LLaMA-family decoder with a static KV cache, in this library's ops: the model that
``my-ops-export --kv-cache LEN`` turns into a package that generates tokens.

:class:`LlamaDecoder` computes what ``transformers``' ``LlamaForCausalLM`` computes (the
same weights, RMS norms, rotary positions, grouped-query attention and SwiGLU MLP), but
one step at a time over a cache it keeps: each layer's keys and values are buffers of
``cache_length`` positions that ``forward`` writes in place (``index_copy_``), so that a
package exported from it keeps them between calls. One call takes any number of new
tokens, from 1 (a decode step) to the cache's length (a prompt):

    logits = decoder(input_ids, positions)   # [1, T] int64, [T] int64 -> [1, vocab]

``positions`` are the tokens' places in the sequence (``start .. start + T - 1``, the last
the highest); the logits are the last token's. Attention reads the filled part of the cache,
positions ``0 .. positions[-1]``, under a causal mask (position ``j`` is seen by a token at
``p`` when ``j <= p``): a length the package reads from ``positions`` at run time, so that
one package serves every prompt length and fill, and a decode step's attention costs what
the tokens so far need rather than the whole cache (``custom_ops=False``, the model in ATen
ops: the whole cache, under the same mask). Batch 1: an edge device generates for one user
at a time.

Build one from a loaded Hugging Face model with :meth:`LlamaDecoder.from_hf`, and hand
:func:`decoder_spec`'s result to the exporter (the factory protocol of
``deploy/default_model.py``, with ``kv_cache``)::

    def make(kv_cache: int):
        lm = transformers.AutoModelForCausalLM.from_pretrained(...)
        return my_ops.llama.decoder_spec(my_ops.llama.LlamaDecoder.from_hf(lm, kv_cache))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .ops.fused_add_rms_norm import fused_add_rms_norm, fused_add_rms_norm_
from .ops.rms_norm import rms_norm
from .ops.rotary_embedding import rotary_embedding
from .ops.silu_and_mul import silu_and_mul


def _aten_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _aten_fused_add_rms_norm(x, residual, weight, eps):
    h = x + residual
    return _aten_rms_norm(h, weight, eps), h


def _fused_add_rms_norm(x, residual, weight, eps):
    # Without autograd (inference, an export) the residual stream is written in place: no new
    # tensors per layer. With it, the functional op, which has a gradient.
    if torch.is_grad_enabled():
        return fused_add_rms_norm(x, residual, weight, eps)
    fused_add_rms_norm_(x, residual, weight, eps)
    return x, residual


def _rotary_embedding(x, cos, sin, positions):
    # The op gathers each token's row of the tables itself.
    return rotary_embedding(x, cos, sin, positions=positions)


def _aten_rotary_embedding(x, cos, sin, positions):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[positions].unsqueeze(-2), sin[positions].unsqueeze(-2)
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def _aten_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return nn.functional.silu(gate) * up


# The block's ops: this library's, or the same math in ATen ops (custom_ops=False: the model
# other runtimes and Inductor compile on their own, for comparisons).
_OPS = {
    True: (rms_norm, _fused_add_rms_norm, _rotary_embedding, silu_and_mul),
    False: (_aten_rms_norm, _aten_fused_add_rms_norm, _aten_rotary_embedding, _aten_silu_and_mul),
}

# The buffers of every layer that hold the state, by the names a package records them under
# (``layers.<i>.<name>``).
CACHE_BUFFERS = ("k_cache", "v_cache")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """The sizes of a LLaMA-family model, as transformers' ``LlamaConfig`` names them."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float


class _Attention(nn.Module):
    def __init__(self, config: LlamaConfig, cache_length: int, custom_ops: bool) -> None:
        super().__init__()
        self.rotary = _OPS[custom_ops][2]
        # ExecuTorch's lowering of SDPA lays its output out in a way the grouped query's view
        # cannot read: the model in ATen ops repeats the cache, as transformers' does.
        self.repeat_kv = not custom_ops
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        width = (self.heads + 2 * self.kv_heads) * self.head_dim
        # q, k and v as one product: one pass over the activations instead of three.
        self.qkv = nn.Linear(config.hidden_size, width, bias=False)
        self.o = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)
        shape = (1, self.kv_heads, cache_length, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        filled: int,
    ) -> torch.Tensor:
        tokens = x.shape[1]
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([q_width, kv_width, kv_width], dim=-1)
        q = self.rotary(q.view(1, tokens, self.heads, self.head_dim), cos, sin, positions)
        k = self.rotary(k.view(1, tokens, self.kv_heads, self.head_dim), cos, sin, positions)
        v = v.view(1, tokens, self.kv_heads, self.head_dim)
        self.k_cache.index_copy_(2, positions, k.transpose(1, 2))
        self.v_cache.index_copy_(2, positions, v.transpose(1, 2))
        k_cache, v_cache = self.k_cache[:, :, :filled], self.v_cache[:, :, :filled]
        # Query head h reads kv head h // group.
        group = self.heads // self.kv_heads
        q = q.transpose(1, 2)
        if self.repeat_kv:
            # As transformers writes it (repeat_kv): the cache repeated for each query head.
            out = nn.functional.scaled_dot_product_attention(
                q,
                k_cache.repeat_interleave(group, dim=1),
                v_cache.repeat_interleave(group, dim=1),
                attn_mask=mask,
            )
        else:
            # Without repeating the cache: each kv head's group of query heads is one longer
            # query.
            q = q.reshape(1, self.kv_heads, group * tokens, self.head_dim)
            out = nn.functional.scaled_dot_product_attention(
                q, k_cache, v_cache, attn_mask=mask.repeat(group, 1)
            )
            out = out.view(1, self.heads, tokens, self.head_dim)
        return self.o(out.transpose(1, 2).reshape(1, tokens, q_width))


class _MLP(nn.Module):
    def __init__(self, config: LlamaConfig, custom_ops: bool) -> None:
        super().__init__()
        self.silu_and_mul = _OPS[custom_ops][3]
        # gate and up as one product, whose halves silu_and_mul combines.
        self.gate_up = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.silu_and_mul(self.gate_up(x)))


class _Layer(nn.Module):
    def __init__(self, config: LlamaConfig, cache_length: int, custom_ops: bool) -> None:
        super().__init__()
        self.input_norm = nn.Parameter(torch.ones(config.hidden_size))
        self.attention = _Attention(config, cache_length, custom_ops)
        self.post_attention_norm = nn.Parameter(torch.ones(config.hidden_size))
        self.mlp = _MLP(config, custom_ops)


class LlamaDecoder(nn.Module):
    """See the module's docstring. ``inv_freq``: the rotary frequencies, one per pair of a
    head's features (transformers' ``rotary_emb.inv_freq``), scaled by
    ``attention_scaling``, as transformers scales its tables."""

    def __init__(
        self,
        config: LlamaConfig,
        cache_length: int,
        inv_freq: torch.Tensor,
        attention_scaling: float = 1.0,
        tie_word_embeddings: bool = False,
        custom_ops: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(cache_length, int) or isinstance(cache_length, bool):
            raise TypeError(f"cache_length must be an int, got {cache_length!r}")
        if cache_length < 2:
            raise ValueError(f"cache_length must be at least 2, got {cache_length}")
        if config.num_attention_heads % config.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({config.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({config.num_key_value_heads})"
            )
        if inv_freq.shape != (config.head_dim // 2,):
            raise ValueError(
                f"inv_freq must have head_dim / 2 = {config.head_dim // 2} entries, "
                f"got shape {list(inv_freq.shape)}"
            )
        self.config = config
        self.cache_length = cache_length
        # ExecuTorch's lowering (to_edge) cannot trace a length read from a tensor: the model in
        # ATen ops reads the whole cache under the mask, as transformers' static cache does.
        self.reads_filled_cache = custom_ops
        self._rms_norm, self._fused_add_rms_norm = _OPS[custom_ops][:2]
        self.eps = float(config.rms_norm_eps)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            _Layer(config, cache_length, custom_ops) for _ in range(config.num_hidden_layers)
        )
        self.norm = nn.Parameter(torch.ones(config.hidden_size))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        # The angles in float32, as transformers computes them (position times frequency,
        # then cos and sin), for every position of the cache.
        angles = torch.outer(
            torch.arange(cache_length, dtype=torch.float32), inv_freq.to(torch.float32)
        )
        self.register_buffer("cos_table", angles.cos() * attention_scaling, persistent=False)
        self.register_buffer("sin_table", angles.sin() * attention_scaling, persistent=False)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def state_names(self) -> list[str]:
        """The buffers forward() updates: the package's state."""
        return [
            f"layers.{i}.attention.{name}"
            for i in range(len(self.layers))
            for name in CACHE_BUFFERS
        ]

    def reset(self) -> None:
        """Empties the cache (eager use; a package's session has its own)."""
        for layer in self.layers:
            layer.attention.k_cache.zero_()
            layer.attention.v_cache.zero_()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_table, self.sin_table
        # The filled part of the cache, up to the last new token's position: a size known at
        # run time (an unbacked size in the exported program, which checks these bounds).
        # Reading the whole cache under the mask instead cost a SmolLM2 int8 decoding step a
        # quarter of its time at fill 16-80 of 512.
        if self.reads_filled_cache:
            filled = positions[-1].item() + 1
            torch._check(filled >= 1)
            torch._check(filled <= self.cache_length)
        else:
            filled = self.cache_length
        cache_positions = torch.arange(filled, device=positions.device)
        mask = cache_positions.unsqueeze(0) <= positions.unsqueeze(1)
        h = self.embed(input_ids)
        residual = None
        for layer in self.layers:
            if residual is None:
                residual = h
                x = self._rms_norm(h, layer.input_norm, self.eps)
            else:
                x, residual = self._fused_add_rms_norm(h, residual, layer.input_norm, self.eps)
            h = layer.attention(x, positions, cos, sin, mask, filled)
            x, residual = self._fused_add_rms_norm(h, residual, layer.post_attention_norm, self.eps)
            h = layer.mlp(x)
        # Only the last token's logits: the next token's distribution.
        last = (h[:, -1] + residual[:, -1]).unsqueeze(1)
        return self.lm_head(self._rms_norm(last, self.norm, self.eps)).squeeze(1)

    @classmethod
    def from_hf(
        cls,
        lm: nn.Module,
        cache_length: int,
        tie_word_embeddings: bool = False,
        custom_ops: bool = True,
    ) -> LlamaDecoder:
        """The decoder of a transformers ``LlamaForCausalLM`` (or a model of its layout: SmolLM2,
        TinyLlama, ...), with a copy of its float32 weights. Refuses what it does not compute:
        biases, another activation.

        A model whose LM head shares the embedding's weights gets a copy of them for its head
        unless ``tie_word_embeddings``: the exporter then packs the head like every other linear
        layer (``--float-linear packed``), which made SmolLM2's decode steps 1.3x (one thread)
        to 1.5x (two) faster than its tied product through LibTorch's matrix-vector code, for
        49152 x 576 floats (113 MB) more. ``custom_ops=False``: the same decoder in ATen ops, for
        Inductor and other runtimes to compile on their own."""
        hf = lm.config
        text = getattr(hf, "get_text_config", lambda: hf)()
        for name, expected in (
            ("hidden_act", "silu"),
            ("attention_bias", False),
            ("mlp_bias", False),
        ):
            value = getattr(text, name, expected)
            if value != expected:
                raise ValueError(f"{type(lm).__name__}: {name}={value!r} is not supported")
        heads = text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        config = LlamaConfig(
            vocab_size=text.vocab_size,
            hidden_size=text.hidden_size,
            intermediate_size=text.intermediate_size,
            num_hidden_layers=text.num_hidden_layers,
            num_attention_heads=heads,
            num_key_value_heads=getattr(text, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            rms_norm_eps=text.rms_norm_eps,
        )
        # Shared only where the model shares them and the caller asks for it.
        tied = tie_word_embeddings and bool(getattr(text, "tie_word_embeddings", False))
        rotary = lm.model.rotary_emb
        decoder = cls(
            config,
            cache_length,
            rotary.inv_freq.detach().float(),
            float(getattr(rotary, "attention_scaling", 1.0)),
            tie_word_embeddings=tied,
            custom_ops=custom_ops,
        )
        src = lm.model

        def copy(dst: torch.Tensor, *tensors: torch.Tensor) -> None:
            dst.copy_(torch.cat([t.detach().float() for t in tensors]))

        with torch.no_grad():
            copy(decoder.embed.weight, src.embed_tokens.weight)
            for mine, theirs in zip(decoder.layers, src.layers, strict=True):
                attn, mlp = theirs.self_attn, theirs.mlp
                copy(mine.input_norm, theirs.input_layernorm.weight)
                copy(
                    mine.attention.qkv.weight,
                    attn.q_proj.weight,
                    attn.k_proj.weight,
                    attn.v_proj.weight,
                )
                copy(mine.attention.o.weight, attn.o_proj.weight)
                copy(mine.post_attention_norm, theirs.post_attention_layernorm.weight)
                copy(mine.mlp.gate_up.weight, mlp.gate_proj.weight, mlp.up_proj.weight)
                copy(mine.mlp.down.weight, mlp.down_proj.weight)
            copy(decoder.norm, src.norm.weight)
            if not tied:
                copy(decoder.lm_head.weight, lm.lm_head.weight)
        return decoder.eval()


@dataclasses.dataclass
class DecoderSpec:
    """What the exporter takes of a decoder (the factory protocol, deploy/default_model.py):
    one package for prompts of 1 to ``cache_length`` tokens and for single decode steps."""

    module: LlamaDecoder
    example_inputs: tuple[torch.Tensor, torch.Tensor]
    dynamic_shapes: Any
    make_inputs: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    max_batch: int
    cache_length: int
    vocab_size: int
    atol: float = 1e-4
    rtol: float = 1e-4


def decoder_spec(decoder: LlamaDecoder, seed: int = 0) -> DecoderSpec:
    """The export spec of ``decoder``: inputs ``(input_ids [1, T], positions [T])`` with T
    dynamic in 1 .. cache_length; the exporter verifies prompts of 1, 7 and cache_length
    tokens (its "batch" is the number of tokens here)."""
    length = decoder.cache_length

    def make_inputs(tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed + tokens)
        ids = torch.randint(0, decoder.vocab_size, (1, tokens), generator=generator)
        return ids, torch.arange(tokens)

    tokens = torch.export.Dim("tokens", min=1, max=length)
    return DecoderSpec(
        module=decoder,
        example_inputs=make_inputs(min(4, length)),
        dynamic_shapes={"input_ids": {1: tokens}, "positions": {0: tokens}},
        make_inputs=make_inputs,
        max_batch=length,
        cache_length=length,
        vocab_size=decoder.vocab_size,
    )
