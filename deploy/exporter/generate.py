"""Generating tokens with a decoder package in Python: my_ops.deploy.Session and generate.

A decoder package (``my-ops-export --kv-cache LEN``, my_ops.llama) keeps its KV cache in
buffers its runs update in place. A Session owns one such cache: its own zeroed copy of the
package's state, which it hands the package (as AOTInductor user-managed constants) before
each of its runs when another session ran last, so that several sessions of one loaded
package each continue their own sequence. The loop is the C++ SDK's (my_ops/generate.h):
the prompt in one run (prefill), then one run per new token (decode), greedy or sampled with
a seeded generator, stopping at a stop token. Token ids in and out: no tokenizer here.

Sessions of one loaded package take turns (one run at a time); a session is for one thread.
"""

from __future__ import annotations

import dataclasses
import json
import time
import weakref
from collections.abc import Sequence
from typing import Any

from .contract import load_contract


class GenerateError(ValueError):
    """A prompt, sampling setting or package that generate() refuses; the message names it.
    The session is as it was before the call."""


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How the next token is picked from the last logits.

    temperature 0 is greedy (the first of the largest logits); above 0, the logits are divided
    by it, cut to the ``top_k`` largest (0: all) and to the smallest set whose probabilities
    reach ``top_p`` (1: all), and a token is drawn with a generator seeded with ``seed``.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def check(self) -> None:
        t, k, p = self.temperature, self.top_k, self.top_p
        if isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0:
            raise GenerateError(f"temperature must be a number >= 0, got {t!r}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise GenerateError(f"top_k must be an int >= 0, got {k!r}")
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1:
            raise GenerateError(f"top_p must be in (0, 1], got {p!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise GenerateError(f"seed must be an int, got {self.seed!r}")


def pick(logits: Any, sampling: Sampling, generator: Any) -> int:
    """The next token from one row of logits (see Sampling)."""
    import torch

    logits = logits.reshape(-1).float()
    if sampling.temperature == 0:
        return int(torch.argmax(logits))
    scaled = logits / sampling.temperature
    if 0 < sampling.top_k < scaled.numel():
        kth = torch.topk(scaled, sampling.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if sampling.top_p < 1:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        # Every token whose predecessors already reach top_p is cut; the first never is.
        cut = order[before >= sampling.top_p]
        probs = probs.index_fill(0, cut, 0.0)
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclasses.dataclass(frozen=True)
class Generated:
    """What generate() produced: the new tokens, and the time of each phase."""

    tokens: list[int]
    prompt_tokens: int
    prefill_seconds: float
    decode_seconds: float  # the runs after the prefill

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        steps = len(self.tokens) - 1
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds else 0.0


# The session whose state each loaded package holds now, by package.
_bound: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


class Session:
    """One sequence over a loaded decoder package (my_ops.deploy.load): its own KV cache,
    and the position the next token goes to."""

    def __init__(self, model: Any) -> None:
        import torch

        contract = load_contract()
        metadata = model.get_metadata()
        decoder = metadata.get(contract.decoder_metadata_key)
        state = metadata.get(contract.state_metadata_key)
        if decoder is None or state is None:
            raise GenerateError(
                "the package is not a decoder with a KV cache (export it with --kv-cache)"
            )
        record = json.loads(decoder)
        self.model = model
        self.cache_length = int(record["cache_length"])
        self.vocab_size = int(record["vocab_size"])
        dtypes = {c10: getattr(torch, name) for name, c10 in contract.input_dtypes.items()}
        self._state = {
            name: torch.zeros(spec["shape"], dtype=dtypes[spec["dtype"]])
            for name, spec in json.loads(state).items()
        }
        self.position = 0

    def reset(self) -> None:
        """Starts a new sequence: the cache emptied, the next token at position 0."""
        for t in self._state.values():
            t.zero_()
        self.position = 0

    def step(self, token_ids: Sequence[int]) -> Any:
        """Runs the package on the tokens at the session's next positions; returns the last
        one's logits [vocab] and advances. Refuses (GenerateError, nothing run) tokens that do
        not fit the vocabulary or the cache."""
        import torch

        ids = list(token_ids)
        self._check_tokens(ids, "token_ids")
        if self.position + len(ids) > self.cache_length:
            raise GenerateError(
                f"{len(ids)} tokens at position {self.position} run past the end of the KV "
                f"cache ({self.cache_length} positions): reset() the session"
            )
        positions = torch.arange(self.position, self.position + len(ids))
        if _bound.get(self.model) != id(self):
            self.model.load_constants(self._state, check_full_update=False, user_managed=True)
            _bound[self.model] = id(self)
        with torch.inference_mode():
            out = self.model(torch.tensor([ids], dtype=torch.int64), positions)
        self.position += len(ids)
        logits = out[0] if isinstance(out, (list, tuple)) else out
        return logits.reshape(-1)

    def _check_tokens(self, ids: list[int], name: str) -> None:
        if not ids:
            raise GenerateError(f"{name} is empty")
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < self.vocab_size:
                raise GenerateError(
                    f"{name}[{i}] = {t!r} is not a token id of the vocabulary "
                    f"(0 .. {self.vocab_size - 1})"
                )

    def __del__(self) -> None:
        # The package must not keep running on a dead session's tensors.
        model = getattr(self, "model", None)
        if model is not None and _bound.get(model) == id(self):
            del _bound[model]

    def generate(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        sampling: Sampling | None = None,
        stop_token: int | None = None,
    ) -> Generated:
        """Continues the session's sequence with `prompt_ids` (a list or 1-D integer tensor) and
        then up to `max_new_tokens` new tokens, stopping after `stop_token`."""
        import torch

        sampling = sampling or Sampling()
        sampling.check()
        if isinstance(prompt_ids, torch.Tensor):
            if prompt_ids.dim() != 1 or prompt_ids.is_floating_point() or prompt_ids.is_complex():
                raise GenerateError(
                    f"prompt_ids must be a 1-D integer tensor, got {prompt_ids.dim()}-D "
                    f"{prompt_ids.dtype}"
                )
            prompt_ids = prompt_ids.tolist()
        prompt = list(prompt_ids)
        self._check_tokens(prompt, "prompt_ids")
        n = max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise GenerateError(f"max_new_tokens must be an int >= 1, got {n!r}")
        if stop_token is not None:
            self._check_tokens([stop_token], "stop_token")
        # The last new token is not run: the prompt and n - 1 new tokens take positions.
        needed = self.position + len(prompt) + n - 1
        if needed > self.cache_length:
            raise GenerateError(
                f"a prompt of {len(prompt)} tokens and {n} new tokens need {needed} positions"
                + (f" (after {self.position} already used)" if self.position else "")
                + f", the KV cache has {self.cache_length}"
            )
        generator = torch.Generator().manual_seed(sampling.seed)
        start = time.perf_counter()
        token = pick(self.step(prompt), sampling, generator)
        prefill = time.perf_counter() - start
        tokens = [token]
        start = time.perf_counter()
        while len(tokens) < n and token != stop_token:
            token = pick(self.step([token]), sampling, generator)
            tokens.append(token)
        return Generated(tokens, len(prompt), prefill, time.perf_counter() - start)


def generate(
    model: Any,
    prompt_ids: Any,
    max_new_tokens: int,
    sampling: Sampling | None = None,
    stop_token: int | None = None,
) -> Generated:
    """generate() in a new session of `model` (a loaded decoder package)."""
    return Session(model).generate(prompt_ids, max_new_tokens, sampling, stop_token)
