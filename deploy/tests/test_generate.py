"""Generating tokens with a decoder package (//deploy:decoder_package, a small LLaMA with a KV
cache of 64 positions) in Python, against transformers' own greedy generate on the same model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import EXIT_CODES, error_lines, run_loader

from deploy import GenerateError, Sampling, Session, generate, load
from deploy.testing import tiny_llama

CACHE = 64


@pytest.fixture(scope="module")
def reference():
    return tiny_llama.hf_model()


@pytest.fixture(scope="module")
def model(decoder_package: Path):
    return load(decoder_package / "model.pt2")


def prompt(seed: int, length: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, tiny_llama.VOCAB, (length,), generator=g).tolist()


def hf_greedy(reference, ids: list[int], n: int) -> list[int]:
    """transformers' greedy tokens, up to n or its end-of-sequence token."""
    with torch.no_grad():
        out = reference.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    return out[0, len(ids) :].tolist()


# transformers stops at the model's end-of-sequence token; the loops stop at a stop token.
EOS = tiny_llama.hf_model().config.eos_token_id


def test_the_manifest_records_the_state(decoder_package: Path) -> None:
    manifest = json.loads((decoder_package / "manifest.json").read_text())
    state = manifest["state"]
    # Two layers, a key and a value cache each: [1, kv heads, cache, head dim].
    assert sorted(state["tensors"]) == [
        f"layers.{i}.attention.{kind}_cache" for i in (0, 1) for kind in ("k", "v")
    ]
    for spec in state["tensors"].values():
        assert spec == {"dtype": "Float", "shape": [1, 2, CACHE, 16]}
    assert state["decoder"] == {"cache_length": CACHE, "vocab_size": tiny_llama.VOCAB}


def assert_empty_cache(folder: Path) -> None:
    weights = json.loads((folder / "weights.json").read_text())
    blob = (folder / "weights.bin").read_bytes()
    caches = [c for c in weights["constants"] if c["name"].endswith("_cache")]
    assert len(caches) == 4
    for c in caches:
        values = torch.frombuffer(bytearray(blob), dtype=torch.uint8)[
            c["offset"] : c["offset"] + 4 * 2 * CACHE * 16
        ].view(torch.float32)
        assert values.abs().max() == 0, c["name"]
    # And the model's other weights are there.
    assert any(
        torch.frombuffer(bytearray(blob[c["offset"] : c["offset"] + 256]), dtype=torch.float32)
        .abs()
        .max()
        > 0
        for c in weights["constants"]
        if c["name"].endswith("qkv.weight")
    )


def test_the_package_starts_from_an_empty_cache(decoder_package: Path) -> None:
    # The export verifies the package by running it, which writes into the cache's buffers.
    assert_empty_cache(decoder_package)


def test_a_weights_file_for_a_decoder_starts_from_an_empty_cache(
    decoder_package: Path, tmp_path: Path
) -> None:
    from deploy import export
    from my_ops.llama import LlamaDecoder

    decoder = LlamaDecoder.from_hf(tiny_llama.hf_model(), CACHE)
    out = tmp_path / "weights"
    export(decoder, None, out, base=decoder_package, cache=False)
    assert_empty_cache(out)
    # The caller's model is as it was given too.
    assert all(b.abs().max() == 0 for n, b in decoder.named_buffers() if n.endswith("_cache"))


@pytest.mark.parametrize(("seed", "length", "new"), [(1, 7, 40), (2, 1, 20), (3, 24, 41)])
def test_greedy_generation_equals_transformers(model, reference, seed, length, new) -> None:
    ids = prompt(seed, length)
    expected = hf_greedy(reference, ids, new)
    # A sequence that does not settle on one token shows a wrong position or cache.
    assert len(set(expected)) > 5
    got = generate(model, ids, new, stop_token=EOS)
    assert got.tokens == expected
    assert got.prompt_tokens == length


def test_the_last_position_of_the_cache_is_usable(model, reference) -> None:
    ids = prompt(4, 30)
    # 30 prompt tokens and 35 new ones fill all 64 positions (the last new token is not run).
    expected = hf_greedy(reference, ids, CACHE - 29)
    assert generate(model, ids, CACHE - 29, stop_token=EOS).tokens == expected


@pytest.mark.parametrize("exported", [False, True], ids=["eager", "exported"])
def test_a_step_reads_no_cache_position_past_its_own(exported) -> None:
    # Positions past the filled part hold NaN: a step that read them, even under the mask,
    # would give NaN (a masked probability of 0 times NaN), so equal finite logits mean they
    # were not read. The exported program must keep that: its attention's length is read
    # from the positions at run time.
    spec = tiny_llama.make(CACHE)
    run = spec.module
    if exported:
        run = torch.export.export(
            run, spec.example_inputs, dynamic_shapes=spec.dynamic_shapes, strict=False
        ).module()
    caches = [b for name, b in run.named_buffers() if name.endswith(("k_cache", "v_cache"))]
    assert len(caches) == 2 * tiny_llama.hf_model().config.num_hidden_layers
    ids = torch.tensor([prompt(5, 6)])

    def prompt_then_step(past: float) -> list[torch.Tensor]:
        with torch.no_grad():
            for cache in caches:
                cache.zero_()
                cache[:, :, 7:] = past
            return [run(ids, torch.arange(6)), run(ids[:, :1], torch.tensor([6]))]

    clean, poisoned = prompt_then_step(0.0), prompt_then_step(float("nan"))
    for a, b in zip(clean, poisoned, strict=True):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_two_sessions_interleaved_step_by_step_each_produce_their_own_tokens(model) -> None:
    a_ids, b_ids = prompt(5, 9), prompt(6, 3)
    alone_a = Session(model).generate(a_ids, 12).tokens
    alone_b = Session(model).generate(b_ids, 12).tokens
    a, b = Session(model), Session(model)
    got_a = [int(a.step(a_ids).argmax())]
    got_b = [int(b.step(b_ids).argmax())]
    while len(got_a) < 12:
        got_a.append(int(a.step([got_a[-1]]).argmax()))
        got_b.append(int(b.step([got_b[-1]]).argmax()))
    assert alone_a != alone_b
    assert (got_a, got_b) == (alone_a, alone_b)


def test_a_session_continues_its_sequence_and_starts_over_after_reset(model, reference) -> None:
    ids = prompt(7, 5)
    whole = hf_greedy(reference, ids, 11)
    assert EOS not in whole
    session = Session(model)
    first = session.generate(ids, 4).tokens
    assert first == whole[:4]
    # The prompt and 3 new tokens ran; the last new token is the next call's prompt.
    assert session.position == 5 + 3
    assert session.generate(first[-1:], 7).tokens == whole[4:11]
    assert session.position == 8 + 1 + 6
    session.reset()
    assert session.position == 0
    assert session.generate(ids, 11).tokens == whole


def test_sampling_is_seeded_and_keeps_to_top_k(model) -> None:
    ids = prompt(8, 6)
    sampling = Sampling(temperature=0.8, top_k=5, top_p=0.9, seed=42)
    first = generate(model, ids, 20, sampling).tokens
    assert generate(model, ids, 20, sampling).tokens == first
    assert generate(model, ids, 20, Sampling(temperature=0.8, top_k=5, seed=7)).tokens != first
    # Every sampled token is among the 5 most likely after its prefix (greedy steps of a
    # session replaying the sampled sequence).
    session = Session(model)
    logits = session.step(ids)
    for token in first:
        assert token in torch.topk(logits, 5).indices.tolist()
        logits = session.step([token])


def test_generation_stops_after_the_stop_token(model) -> None:
    ids = prompt(9, 4)
    tokens = generate(model, ids, 30).tokens
    stop = tokens[5]
    assert generate(model, ids, 30, stop_token=stop).tokens == tokens[: tokens.index(stop) + 1]


@pytest.mark.parametrize(
    ("prompt_ids", "new", "message"),
    [
        ([], 4, "prompt_ids is empty"),
        ([1, tiny_llama.VOCAB], 4, f"prompt_ids[1] = {tiny_llama.VOCAB} is not a token id"),
        ([-1], 4, "prompt_ids[0] = -1 is not a token id"),
        (torch.ones(2, 3, dtype=torch.int64), 4, "prompt_ids must be a 1-D integer tensor"),
        (torch.ones(3), 4, "prompt_ids must be a 1-D integer tensor"),
        (list(range(60)), 6, "need 65 positions, the KV cache has 64"),
        ([1, 2], 0, "max_new_tokens must be an int >= 1"),
    ],
)
def test_bad_prompts_are_refused_and_the_session_stays_usable(model, prompt_ids, new, message):
    session = Session(model)
    expected = session.generate([3, 4, 5], 6).tokens
    session.reset()
    with pytest.raises(GenerateError, match=message.replace("[", r"\[").replace("]", r"\]")):
        session.generate(prompt_ids, new)
    assert session.position == 0
    assert session.generate([3, 4, 5], 6).tokens == expected


def test_a_step_past_the_end_of_the_cache_is_refused(model) -> None:
    session = Session(model)
    session.step(list(range(CACHE)))
    with pytest.raises(GenerateError, match="run past the end of the KV cache"):
        session.step([1])
    assert session.position == CACHE


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        (Sampling(temperature=-1.0), "temperature must be a number >= 0"),
        (Sampling(temperature=1.0, top_k=-2), "top_k must be an int >= 0"),
        (Sampling(temperature=1.0, top_p=0.0), r"top_p must be in \(0, 1\]"),
    ],
)
def test_bad_sampling_is_refused(model, sampling, message) -> None:
    with pytest.raises(GenerateError, match=message):
        generate(model, [1, 2], 3, sampling)


def test_a_package_without_state_is_not_a_decoder(default_package: Path) -> None:
    with pytest.raises(GenerateError, match="not a decoder with a KV cache"):
        Session(load(default_package / "model.pt2"))


# The C++ loader's --generate (the SDK's Session underneath).


@pytest.fixture
def loader_generate(loader_bin, ops_library, decoder_package, tmp_path):
    """loader --prompt-ids (a file of `ids`) and `args` on `package` (the decoder's)."""

    def run(ids, *args: str, package: Path = decoder_package):
        prompt_file = tmp_path / "prompt.pt"
        torch.save(ids if isinstance(ids, torch.Tensor) else torch.tensor(ids), prompt_file)
        return run_loader(
            loader_bin,
            [
                "--ops",
                ops_library,
                "--package",
                str(package / "model.pt2"),
                "--prompt-ids",
                str(prompt_file),
                *args,
            ],
            tmp_path / "tmp",
        )

    return run


@pytest.mark.parametrize(("seed", "length", "new"), [(1, 7, 40), (3, 24, 41)])
def test_the_loader_generates_transformers_greedy_tokens(
    loader_generate, reference, tmp_path, seed, length, new
) -> None:
    ids = prompt(seed, length)
    out = tmp_path / "tokens.pt"
    proc = loader_generate(
        ids,
        "--generate",
        str(new),
        "--stop-token",
        str(EOS),
        "--output",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    expected = hf_greedy(reference, ids, new)
    assert [int(t) for t in proc.stdout.split()] == expected
    (tokens,) = torch.load(out)
    assert tokens.dtype == torch.int64
    assert tokens.tolist() == expected
    assert f"prefill {length} tokens" in proc.stderr
    assert f"decode {len(expected) - 1} tokens" in proc.stderr


def test_the_loader_samples_the_tokens_python_samples(loader_generate, model) -> None:
    ids = prompt(10, 5)
    sampling = Sampling(temperature=0.9, top_k=8, top_p=0.95, seed=1234)
    proc = loader_generate(
        ids,
        "--generate",
        "25",
        "--temperature",
        "0.9",
        "--top-k",
        "8",
        "--top-p",
        "0.95",
        "--seed",
        "1234",
    )
    assert proc.returncode == 0, proc.stderr
    expected = generate(model, ids, 25, sampling).tokens
    assert expected != generate(model, ids, 25).tokens
    assert [int(t) for t in proc.stdout.split()] == expected


@pytest.mark.parametrize(
    ("ids", "new", "message"),
    [
        (torch.tensor([], dtype=torch.int64), 4, "the prompt is empty"),
        ([3, tiny_llama.VOCAB], 4, "the prompt[1] = 512 is not a token id"),
        (
            torch.ones(2, 3, dtype=torch.int64),
            4,
            "expected one 1-D integer tensor of token ids, got a 2-D Long",
        ),
        (torch.ones(3), 4, "expected one 1-D integer tensor of token ids, got a 1-D Float"),
        (list(range(60)), 6, "need 65 positions, the KV cache has 64"),
    ],
)
def test_the_loader_refuses_a_bad_prompt_and_writes_nothing(
    loader_generate, tmp_path, ids, new, message
) -> None:
    out = tmp_path / "tokens.pt"
    proc = loader_generate(
        ids,
        "--generate",
        str(new),
        "--output",
        str(out),
    )
    assert proc.returncode == EXIT_CODES["input_mismatch"], proc.stderr
    assert len(error_lines(proc.stderr)) == 1, proc.stderr
    assert message in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()


def test_the_loader_refuses_to_generate_with_a_package_without_state(
    loader_generate, default_package
) -> None:
    proc = loader_generate([1, 2], "--generate", "3", package=default_package)
    assert proc.returncode == EXIT_CODES["not_decoder"], proc.stderr
    assert "not a decoder with a KV cache" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--generate", "3"], "--generate needs --prompt-ids"),
        (["--generate", "3", "--prompt-ids", "p.pt", "--input", "x.pt"], "--input does not go"),
        (["--generate", "3", "--prompt-ids", "p.pt", "--top-k", "3"], "give --temperature too"),
        (["--prompt-ids", "p.pt", "--input", "x.pt", "--output", "y.pt"], "needs --generate"),
        (["--generate", "3", "--prompt-ids", "p.pt", "--top-p", "0"], "--top-p needs a number"),
    ],
)
def test_generate_usage_errors(loader_bin, decoder_package, tmp_path, args, message) -> None:
    proc = run_loader(
        loader_bin, ["--package", str(decoder_package / "model.pt2"), *args], tmp_path / "tmp"
    )
    assert proc.returncode == EXIT_CODES["usage"], proc.stderr
    assert message in proc.stderr
