"""The T5 backbone: the backbone harness; outputs, incremental decoding (its loss: tests/tasks/test_seq2seq_lm.py)."""

import contextlib

import numpy as np
import pytest
from backbone_harness import BACKBONE_CHECKS, BackboneCase, run_backbone_check, seq2seq_harness_inputs
from helpers import to_numpy

from kbert.backend import fast_paths
from kbert.models import T5, seq2seq_inputs

TINY = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=24)


def tiny(**overrides):
    return T5(**{**TINY, "dropout": 0.0, **overrides})


def batch():
    rng = np.random.default_rng(0)
    encoder = rng.integers(2, 40, (3, 7)).astype("int32")
    encoder[1, 5:] = 0
    targets = rng.integers(2, 40, (3, 5)).astype("int32")
    targets[:, -1] = 1
    targets[2, 3:] = 0
    return seq2seq_inputs(encoder, targets), targets


@pytest.fixture(scope="module")
def model():
    """One tiny v1.0 model (tied, rescaled head) for the checks that only call it."""
    return tiny(num_layers=1, num_decoder_layers=2)


def test_outputs_and_shared_position_bias(model):
    inputs, _ = batch()
    outputs = model(inputs)
    assert sorted(outputs) == ["decoder_sequence_output", "encoder_sequence_output", "logits"]
    assert tuple(outputs["logits"].shape) == (3, 5, 40)
    assert tuple(outputs["encoder_sequence_output"].shape) == (3, 7, 16)
    assert len(model.encoder_layers) == 1 and len(model.decoder_layers) == 2
    # One bias table per stack, none inside the blocks.
    bias_tables = [w.path for w in model.weights if "position_bias" in w.path]
    assert len(bias_tables) == 2


def test_tied_head_is_the_rescaled_embedding(model):
    inputs, _ = batch()
    outputs = model(inputs)
    table = to_numpy(model.token_embedding.embeddings)
    expected = to_numpy(outputs["decoder_sequence_output"]) * 16**-0.5 @ table.T
    np.testing.assert_allclose(to_numpy(outputs["logits"]), expected, atol=1e-5)


def test_padding_is_ignored_by_the_encoder(model):
    inputs, _ = batch()
    changed = {k: v.copy() for k, v in inputs.items()}
    changed["encoder_token_ids"][1, 5:] = 7  # under the padding mask
    np.testing.assert_allclose(
        to_numpy(model(changed)["logits"])[1], to_numpy(model(inputs)["logits"])[1], atol=1e-5
    )


def test_backbone_owns_no_loss():
    # The loss lives in kbert.tasks.Seq2SeqLM.
    assert "compute_loss" not in vars(T5) and "train_step" not in vars(T5)


@pytest.mark.fast_paths_both_ways
@pytest.mark.parametrize("in_place", [False, True])
def test_decode_steps_equal_decode(model, in_place):
    inputs, _ = batch()
    encoder_ids, encoder_mask = inputs["encoder_token_ids"], inputs["encoder_padding_mask"]
    decoder_ids = inputs["decoder_token_ids"]
    encoded = model.encode(encoder_ids, encoder_mask)
    expected = to_numpy(model.decode(decoder_ids, np.ones_like(decoder_ids), encoded, encoder_mask))
    caches = model.self_attention_caches(3, decoder_ids.shape[1])
    cross = model.cross_attention_caches(encoded)
    for index in range(decoder_ids.shape[1]):
        previous = caches
        with fast_paths.in_place_cache_writes() if in_place else contextlib.nullcontext():
            logits, caches = model.decode_step(
                decoder_ids[:, index : index + 1], index, caches, cross, encoder_mask
            )
            writes_in_place = fast_paths.writes_caches_in_place()
        np.testing.assert_allclose(to_numpy(logits), expected[:, index], atol=1e-5, rtol=0)
        # The scope reaches every block's attention: PyTorch's fast path writes into the given caches.
        assert all((new is old) == writes_in_place for new, old in zip(caches, previous))


def test_seq2seq_inputs_shift_right():
    inputs = seq2seq_inputs(np.array([[4, 5, 1, 0]]), np.array([[6, 7, 1, 0]]))
    assert inputs["decoder_token_ids"].tolist() == [[0, 6, 7, 1]]
    assert inputs["decoder_padding_mask"].tolist() == [[1, 1, 1, 0]]
    assert inputs["encoder_padding_mask"].tolist() == [[1, 1, 1, 0]]
    with pytest.raises(ValueError, match="expects"):
        seq2seq_inputs(np.array([1, 2]), np.array([[1]]))


@pytest.mark.parametrize("check", BACKBONE_CHECKS)
def test_backbone_harness(check, tmp_path):
    # v1.1 (gated GELU, untied head); v1.0 runs the harness through tests/tasks/test_seq2seq_lm.py.
    v11 = dict(num_layers=1, num_decoder_layers=2, activation="gelu_approximate",
               use_gated_activation=True, tie_embeddings=False)
    run_backbone_check(check, BackboneCase(lambda: T5(**{**TINY, **v11}), seq2seq_harness_inputs), tmp_path)


def test_rejects_indivisible_width():
    with pytest.raises(ValueError, match="not divisible"):
        T5(vocabulary_size=10, num_layers=1, num_heads=3, hidden_dim=16, intermediate_dim=8)
