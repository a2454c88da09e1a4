"""The BART backbone: the backbone harness; outputs, incremental decoding, fine-tuning (its parity with
transformers: tests/checkpoints/test_bart_converter.py)."""

import contextlib

import keras
import numpy as np
import pytest
from backbone_harness import BACKBONE_CHECKS, BackboneCase, run_backbone_check, seq2seq_harness_inputs
from helpers import to_numpy

from kbert.backend import fast_paths
from kbert.models import BART, seq2seq_inputs
from kbert.models.bart import DECODER_START_ID, END_ID, PAD_ID
from kbert.tasks import Seq2SeqLM

TINY = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=24,
            max_positions=12)


def tiny(**overrides):
    return BART(**{**TINY, "dropout": 0.0, **overrides})


def batch():
    rng = np.random.default_rng(0)
    encoder = rng.integers(3, 40, (3, 7)).astype("int32")
    encoder[1, 5:] = PAD_ID
    targets = rng.integers(3, 40, (3, 5)).astype("int32")
    targets[:, -1] = 2
    targets[2, 3:] = PAD_ID
    return seq2seq_inputs(encoder, targets, pad_id=PAD_ID, start_id=DECODER_START_ID), targets


@pytest.fixture(scope="module")
def model():
    return tiny(num_layers=1, num_decoder_layers=2)


def test_outputs_and_tied_biased_head(model):
    inputs, _ = batch()
    model.lm_head.bias.assign(np.linspace(-1, 1, 40).astype("float32"))
    outputs = model(inputs)
    assert sorted(outputs) == ["decoder_sequence_output", "encoder_sequence_output", "logits"]
    assert tuple(outputs["logits"].shape) == (3, 5, 40)
    assert len(model.encoder_layers) == 1 and len(model.decoder_layers) == 2
    # Tied to the token table, unscaled, plus final_logits_bias.
    table = to_numpy(model.token_embedding.embeddings)
    expected = to_numpy(outputs["decoder_sequence_output"]) @ table.T + np.linspace(-1, 1, 40)
    np.testing.assert_allclose(to_numpy(outputs["logits"]), expected, atol=1e-5)
    assert tuple(model.encoder_position_embedding.embeddings.shape) == (12 + 2, 16)


def test_embedding_reads_positions_from_row_two(model):
    ids = np.array([[5, 6, 7]], "int32")
    embedded = to_numpy(model._embed("encoder", ids, training=False))
    table = to_numpy(model.token_embedding.embeddings)
    positions = to_numpy(model.encoder_position_embedding.embeddings)
    norm = model.encoder_embedding_layer_norm
    x = table[ids[0]] + positions[2:5]
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(embedded[0], x * to_numpy(norm.gamma) + to_numpy(norm.beta), atol=1e-5)


def test_padding_is_ignored_by_the_encoder(model):
    inputs, _ = batch()
    changed = {k: v.copy() for k, v in inputs.items()}
    changed["encoder_token_ids"][1, 5:] = 7
    np.testing.assert_allclose(
        to_numpy(model(changed)["logits"])[1], to_numpy(model(inputs)["logits"])[1], atol=1e-5
    )


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
        with fast_paths.in_place_cache_writes() if in_place else contextlib.nullcontext():
            logits, caches = model.decode_step(
                decoder_ids[:, index : index + 1], index, caches, cross, encoder_mask
            )
        np.testing.assert_allclose(to_numpy(logits), expected[:, index], atol=1e-5, rtol=0)


def harness_inputs(batch, length):
    return seq2seq_harness_inputs(batch, length, pad_id=PAD_ID, start_id=DECODER_START_ID, end_id=END_ID)


@pytest.mark.parametrize("check", BACKBONE_CHECKS)
def test_backbone_harness(check, tmp_path):
    case = BackboneCase(lambda: tiny(num_decoder_layers=1, scale_embedding=True), harness_inputs)
    run_backbone_check(check, case, tmp_path)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
@pytest.mark.slow(reason="enough steps for the loss to fall")
def test_fine_tuning_through_seq2seq_lm_lowers_the_loss():
    keras.utils.set_random_seed(0)
    lm = Seq2SeqLM(tiny())
    inputs, targets = batch()
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = lm.fit(inputs, targets, epochs=15, batch_size=3, verbose=0)
    losses = history.history["loss"]
    print(f"{keras.backend.backend()} bart fine-tuning loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.6 * losses[0]
    generated = lm.generate({k: inputs[k] for k in ("encoder_token_ids", "encoder_padding_mask")},
                            max_new_tokens=5)
    assert generated.shape == (3, 5)


def test_errors():
    with pytest.raises(ValueError, match="not divisible"):
        BART(vocabulary_size=10, num_layers=1, num_heads=3, hidden_dim=16, intermediate_dim=8)
    model = tiny()
    inputs, _ = batch()
    long = {k: np.tile(v, (1, 2)) for k, v in inputs.items()}  # 14 encoder positions > 12
    with pytest.raises(ValueError, match="exceeds"):
        model(long)
    with pytest.raises(ValueError, match="outside the allowed"):
        model({**inputs, "encoder_token_ids": inputs["encoder_token_ids"] + 40})
