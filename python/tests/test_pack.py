"""``my_ops.pack``: swapping a model's float Linear layers for ``linear_packed``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from my_ops.pack import (
    PackedLinear,
    pack_linear_layers,
    pack_linear_weight,
    packable,
    unpack_linear_weight,
)
from testing_utils import run_this_file


class TiedLM(nn.Module):
    """An embedding, three linear layers of which one is 10 wide, and an output projection
    that reads the embedding's weight."""

    def __init__(self, vocab: int = 96, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden, bias=False)
        self.classifier = nn.Linear(hidden, 10)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.embed(tokens)
        h = h + self.down(torch.relu(self.up(h)))
        return self.lm_head(h), self.classifier(h)


def test_packing_is_a_permutation_of_the_weight():
    w = torch.arange(64 * 3, dtype=torch.float32).reshape(64, 3)
    packed = pack_linear_weight(w)
    assert packed.shape == (2, 3, 32) and packed.is_contiguous()
    # packed[p, k, j] = w[32 p + j, k], written out for two entries.
    assert packed[1, 2, 5].item() == w[37, 2].item()
    assert packed[0, 1, 31].item() == w[31, 1].item()
    assert torch.equal(unpack_linear_weight(packed), w)


@pytest.mark.parametrize("shape", [(30, 4), (32,), (2, 32, 4)])
def test_a_weight_that_cannot_be_packed_is_refused(shape):
    with pytest.raises(ValueError, match="out_features a multiple of 32"):
        pack_linear_weight(torch.ones(shape))


def test_packable_leaves_tied_narrow_and_half_precision_layers():
    model = TiedLM()
    names, left = packable(model)
    assert names == ["up", "down"]
    assert set(left) == {"classifier", "lm_head"}
    assert "not a multiple of 32" in left["classifier"]
    assert "tied" in left["lm_head"]
    assert packable(TiedLM().to(torch.bfloat16))[0] == []
    assert packable(model, skip=["d*"])[0] == ["up"]


def test_a_packed_model_computes_what_the_float_model_does():
    torch.manual_seed(0)
    model = TiedLM().eval()
    tokens = torch.randint(0, 96, (2, 9))
    reference = TiedLM().double().eval()
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        want = reference(tokens)
        assert pack_linear_layers(model) == ["up", "down"]
        got = model(tokens)
    assert isinstance(model.up, PackedLinear) and isinstance(model.down, PackedLinear)
    assert model.down.bias is None and model.lm_head.weight is model.embed.weight
    # float32 sums of 64 and 256 products of values about 1 (rounding 2**-24 each) against
    # float64: within 1e-5 relative, 1e-5 absolute.
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5)


def test_a_packed_model_exports_and_holds_each_weight_once():
    torch.manual_seed(1)
    model = TiedLM().eval()
    pack_linear_layers(model)
    tokens = torch.randint(0, 96, (3, 5))
    with torch.no_grad():  # an inference op, as the exporter traces it
        program = torch.export.export(model, (tokens,))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count("my_ops.linear_packed.default") == 2
    shapes = {name: tuple(t.shape) for name, t in program.state_dict.items()}
    shapes |= {name: tuple(t.shape) for name, t in program.constants.items()}
    assert shapes["up.weight"] == (8, 64, 32) and shapes["down.weight"] == (2, 256, 32)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(tokens), model(tokens), rtol=0, atol=0)


if __name__ == "__main__":
    run_this_file(__file__)
