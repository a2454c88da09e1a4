"""The options every generator shares (`kbert.generation.generator.Generator`), checked up front."""

import numpy as np
import pytest

from kbert.generation.causal_lm_generator import CausalLMGenerator
from kbert.generation.seq2seq_generator import Seq2SeqGenerator
from kbert.models import GPT2

VOCAB = 20


@pytest.fixture(scope="module")
def model():
    return GPT2(vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                max_positions=16, end_id=0)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"strategy": "nucleus"}, "strategy"),
        ({"top_k": VOCAB + 1}, r"top_k must be in \[1, 20\]"),
        ({"top_p": 0.0}, "top_p"),
        ({"temperature": 0.0}, "temperature"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"num_beams": 0}, "num_beams"),
        ({"jit_compile": "xla"}, "jit_compile must be 'auto', True or False"),
    ],
)
def test_bad_options_are_named(model, options, message):
    with pytest.raises(ValueError, match=message):
        CausalLMGenerator(model, **options)


def test_defaults_come_from_the_model_and_beams_only_with_beam_search(model):
    greedy = CausalLMGenerator(model, num_beams=3)
    assert (greedy.end_id, greedy.pad_id, greedy.num_beams) == (0, model.pad_id, 1)
    beam = CausalLMGenerator(model, strategy="beam", num_beams=3, end_id=5, pad_id=6)
    assert (beam.end_id, beam.pad_id, beam.num_beams) == (5, 6, 3)


def test_a_model_without_the_interface_is_refused_with_what_it_lacks(model):
    with pytest.raises(ValueError, match="GPT2 lacks encode, cross_attention_caches, self_attention_caches, "
                       "decode_step, decoder_start_id"):
        Seq2SeqGenerator(model)
    with pytest.raises(ValueError, match="such as a decoder-only backbone"):
        CausalLMGenerator(np.zeros(3))
