"""A small LLaMA for the token loops' tests: transformers' ``LlamaForCausalLM`` built from a
config with seeded random weights (the same in every process on one torch release), and the
decoder factory (``--model deploy.testing.tiny_llama:make --kv-cache LEN``) that exports it
through my_ops.llama. The tests compare what a package generates with the transformers model's
own greedy ``generate``.

Weights drawn wider than transformers' default (``initializer_range``) make the logits of
neighbouring tokens differ clearly, so that greedy decoding does not settle on one token and
a wrong cache or position shows in the tokens.
"""

from __future__ import annotations

import torch

VOCAB = 512
SEED = 0


def hf_model():
    """The reference model (transformers), float32, eval mode."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        initializer_range=0.2,
    )
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        return transformers.LlamaForCausalLM(config).eval()


def make(kv_cache: int):
    """The exporter's factory: the reference model as a my_ops.llama decoder."""
    from my_ops.llama import LlamaDecoder, decoder_spec

    return decoder_spec(LlamaDecoder.from_hf(hf_model(), kv_cache))
