"""SpanBertPretrainer: the task harness; MLM + SBO losses against NumPy, training, the tied heads
through saving, bad input."""

import keras
import numpy as np
import pytest
from helpers import assert_close, np_softmax, to_numpy
from task_harness import TASK_CHECKS, paired_case, run_task_check

import kbert
from kbert.pretraining.span_bert_pretrainer import SpanBertPretrainer

TINY = dict(
    vocabulary_size=60,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_positions=32,
    dropout=0.0,
    use_pooler=False,
)
BATCH, LENGTH, PREDICTIONS, MASK_ID = 4, 16, 4, 3


def make_batch(seed=0, batch=BATCH, length=LENGTH):
    """One masked span of 3 tokens per example and one padding prediction slot."""
    rng = np.random.default_rng(seed)
    lengths = length - rng.integers(0, 6, batch)
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    original = rng.integers(5, TINY["vocabulary_size"], (batch, length)) * padding_mask
    original = original.astype("int32")
    original[:, 0] = 1
    names = ("mask_positions", "span_left", "span_right", "span_offsets")
    span = {name: np.zeros((batch, PREDICTIONS), "int32") for name in names}
    weights = np.zeros((batch, PREDICTIONS), "float32")
    for i in range(batch):
        start = rng.integers(1, lengths[i] - 4)
        span["mask_positions"][i, :3] = start + np.arange(3)
        span["span_left"][i, :3] = start - 1
        span["span_right"][i, :3] = start + 3
        span["span_offsets"][i, :3] = np.arange(3)
        weights[i, :3] = 1.0
    mask_ids = np.take_along_axis(original, span["mask_positions"], axis=1)
    mask_ids[:, -1] = 9
    token_ids = original.copy()
    np.put_along_axis(token_ids, span["mask_positions"][:, :3], MASK_ID, axis=1)
    x = {
        "token_ids": token_ids,
        "segment_ids": np.zeros_like(token_ids),
        "padding_mask": padding_mask,
        **span,
    }
    return x, {"mask_ids": mask_ids, "mask_weights": weights}


def np_weighted_cross_entropy(labels, logits, weights):
    log_probs = np.log(np_softmax(logits.astype(np.float64)))
    losses = -np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    return (weights * losses).sum() / (weights.sum() + 1e-5)


def test_heads_are_tied_and_outputs_shaped():
    model = SpanBertPretrainer(kbert.models.Encoder(**TINY))
    table = model.backbone.token_embedding
    assert model.mlm_head.token_embedding is table and model.sbo_head.token_embedding is table
    x, _ = make_batch()
    outputs = model(x)
    assert set(outputs) == {"mlm_logits", "sbo_logits"}
    for logits in outputs.values():
        assert tuple(logits.shape) == (BATCH, PREDICTIONS, TINY["vocabulary_size"])


def test_loss_is_mlm_plus_sbo_from_numpy():
    model = SpanBertPretrainer(kbert.models.Encoder(**TINY))
    x, y = make_batch()
    y_pred = model(x)
    loss = float(to_numpy(model.compute_loss(x, y, y_pred)))
    labels, weights = y["mask_ids"], y["mask_weights"]
    mlm = np_weighted_cross_entropy(labels, to_numpy(y_pred["mlm_logits"]), weights)
    sbo = np_weighted_cross_entropy(labels, to_numpy(y_pred["sbo_logits"]), weights)
    np.testing.assert_allclose(loss, mlm + sbo, rtol=1e-5)
    np.testing.assert_allclose(float(model.sbo_loss_tracker.result()), sbo, rtol=1e-5)


def test_sbo_reads_the_sequence_output():
    """The SBO logits are the head applied to the backbone's hidden states."""
    model = SpanBertPretrainer(kbert.models.Encoder(**TINY))
    x, _ = make_batch()
    sequence = model.backbone({k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")})[
        "sequence_output"
    ]
    expected = model.sbo_head(sequence, x["span_left"], x["span_right"], x["span_offsets"])
    assert_close(model(x)["sbo_logits"], expected, atol=1e-6)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_short_training_run_lowers_the_loss():
    model = SpanBertPretrainer(kbert.models.Encoder(**TINY))
    x, y = make_batch(batch=8)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(x, y, batch_size=8, epochs=40, verbose=0).history
    assert {"loss", "mlm_loss", "mlm_accuracy", "sbo_loss", "sbo_accuracy"} <= set(history)
    losses = history["loss"]
    print(f"span: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.5 * losses[0]
    assert history["sbo_loss"][-1] < 0.5 * history["sbo_loss"][0]


CASE = paired_case(
    lambda: SpanBertPretrainer(kbert.models.Encoder(**TINY), max_span_length=10, position_embedding_dim=12),
    make_batch,
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def test_heads_stay_tied_through_saving(tmp_path):
    model = SpanBertPretrainer(kbert.models.Encoder(**TINY), max_span_length=10, position_embedding_dim=12)
    path = tmp_path / "span.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.sbo_head.token_embedding is restored.backbone.token_embedding
    assert tuple(restored.sbo_head.position_embedding.embeddings.shape) == (10, 12)


def test_missing_span_inputs_are_named():
    model = SpanBertPretrainer(kbert.models.Encoder(**TINY))
    x, _ = make_batch()
    del x["span_offsets"]
    with pytest.raises(ValueError, match=r"SpanBertPretrainer inputs lack \['span_offsets'\]"):
        model(x)
