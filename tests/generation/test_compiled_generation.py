"""Compiled generation on PyTorch (`jit_compile=True`): prompts of new batch sizes and lengths
recompile the decoding step at most once, and the tokens equal eager generation's."""

import functools

import keras
import numpy as np
import pytest
from helpers import BACKEND

from kbert.generation import CausalLMGenerator, Seq2SeqGenerator
from kbert.models import GPT2, T5

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="torch.compile of the decoding step")
SIZES = dict(vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, dropout=0.0)
SHAPES = ((2, 5), (3, 7), (4, 6))  # (batch, prompt length) of the three calls


@pytest.fixture
def compile_counter(monkeypatch):
    """`torch.compile` with dynamo's counting backend (it runs the graphs as they are)."""
    import torch
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=counter))
    torch._dynamo.reset()
    yield counter
    torch._dynamo.reset()


def _prompts(batch, length, encoder):
    ids = np.random.default_rng(batch).integers(1, SIZES["vocabulary_size"], (batch, length)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, :2] = 0  # one row shorter
    ids *= mask
    if encoder:
        return {"encoder_token_ids": ids, "encoder_padding_mask": mask}
    return {"token_ids": ids, "padding_mask": mask}


@pytest.mark.parametrize("family", ["gpt2", "t5"])
def test_new_batch_sizes_and_prompt_lengths_recompile_at_most_once(family, compile_counter):
    keras.utils.set_random_seed(1)
    if family == "gpt2":
        model, generator, encoder = GPT2(**SIZES, max_positions=24, end_id=0), CausalLMGenerator, False
    else:
        model, generator, encoder = T5(**SIZES), Seq2SeqGenerator, True
    graphs = []
    for batch, length in SHAPES:
        x = _prompts(batch, length, encoder)
        # A new generator each call: the model's compiled step is shared.
        compiled = generator(model, max_new_tokens=4, jit_compile=True)(x)
        graphs.append(compile_counter.frame_count)
        np.testing.assert_array_equal(compiled, generator(model, max_new_tokens=4, jit_compile=False)(x))
    assert graphs[0] >= 1 and graphs[2] - graphs[0] <= 1, f"compiled graphs after each call: {graphs}"
