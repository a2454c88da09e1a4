"""Seq2SeqLM: the task harness; the token loss against NumPy, training, generation through the task."""

import keras
import numpy as np
import pytest
from backbone_harness import seq2seq_harness_inputs
from helpers import to_numpy
from task_harness import TASK_CHECKS, TaskCase, run_task_check

import kbert
from kbert.generation import Seq2SeqGenerator
from kbert.models import T5, seq2seq_inputs
from kbert.tasks import Seq2SeqLM

TINY = dict(vocabulary_size=40, num_layers=1, num_decoder_layers=2, num_heads=2, hidden_dim=16,
            intermediate_dim=24, dropout=0.0)


def batch():
    """Teacher-forcing inputs and targets for 3 examples: right padding, each target ending in 1."""
    rng = np.random.default_rng(1)
    sources = np.where(np.arange(7) < [[7], [5], [6]], rng.integers(2, 40, (3, 7)), 0)
    targets = np.where(np.arange(5) < [[5], [5], [3]], rng.integers(2, 40, (3, 5)), 0)
    targets[[0, 1, 2], [4, 4, 2]] = 1
    return seq2seq_inputs(sources, targets), targets.astype("int32")


def np_token_loss(logits, targets, example_weights):
    """Mean cross-entropy over the non-pad targets, each example's tokens weighing its weight."""
    logits = logits.astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    weights = (targets != 0) * example_weights[:, None]
    return -(picked * weights).sum() / weights.sum()


@pytest.fixture(scope="module")
def lm():
    return Seq2SeqLM(T5(**TINY))


def test_outputs_are_the_backbone_logits(lm):
    inputs, _ = batch()
    np.testing.assert_allclose(
        to_numpy(lm(inputs)), to_numpy(lm.backbone(inputs)["logits"]), atol=1e-6
    )


def test_compute_loss_ignores_pad_targets(lm):
    inputs, targets = batch()
    logits = to_numpy(lm(inputs))
    expected = np_token_loss(logits, targets, np.ones(3))
    loss = lm.compute_loss(inputs, targets, lm(inputs))
    assert float(to_numpy(loss)) == pytest.approx(expected, rel=1e-5)
    weights = np.array([1.0, 0.5, 2.0], "float32")
    weighted = lm.compute_loss(inputs, targets, lm(inputs), sample_weight=weights)
    assert float(to_numpy(weighted)) == pytest.approx(np_token_loss(logits, targets, weights), rel=1e-5)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_fit_with_teacher_forcing_learns():
    # v1.1 (gated feed-forward, untied head); v1.0's blocks train in the layer tests.
    lm = Seq2SeqLM(T5(**{**TINY, "num_layers": 2, "num_decoder_layers": None,
                         "activation": "gelu_approximate", "use_gated_activation": True,
                         "tie_embeddings": False}))
    inputs, targets = batch()
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = lm.fit(inputs, targets, batch_size=3, epochs=8, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.7 * losses[0]


def test_span_corruption_pretraining_fits():
    pytest.importorskip("tensorflow")
    from kbert.pretraining import SpanCorruption

    lm = Seq2SeqLM(T5(**TINY))
    stream = np.random.default_rng(0).integers(2, 30, 400).tolist()
    dataset = SpanCorruption(16, 40).dataset(stream, batch_size=2).repeat()
    lm.compile(optimizer=keras.optimizers.Adam(1e-3))
    before = [to_numpy(w) for w in lm.trainable_weights]
    history = lm.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and history.history["loss"][0] > 0
    assert any(not np.array_equal(b, to_numpy(w)) for b, w in zip(before, lm.trainable_weights))


def shifted_targets(x):
    """The targets `seq2seq_inputs` shifted right into the decoder inputs."""
    ids, mask = x["decoder_token_ids"], x["decoder_padding_mask"]
    return np.concatenate([ids[:, 1:], np.ones_like(ids[:, :1])], axis=1) * mask


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    # v1.0 (tied, rescaled head); v1.1 runs the harness through tests/models/test_t5.py.
    case = TaskCase(lambda: Seq2SeqLM(T5(**TINY)), seq2seq_harness_inputs, make_targets=shifted_targets)
    run_task_check(check, case, tmp_path)


def test_generate_is_the_generator_on_the_backbone(lm):
    inputs, _ = batch()
    encoder = {k: inputs[k] for k in ("encoder_token_ids", "encoder_padding_mask")}
    expected = Seq2SeqGenerator(lm.backbone, max_new_tokens=4)(encoder)
    np.testing.assert_array_equal(lm.generate(encoder, max_new_tokens=4), expected)
    np.testing.assert_array_equal(lm.generate(encoder, max_new_tokens=4), expected)  # kept


def test_errors(lm):
    inputs, _ = batch()
    with pytest.raises(ValueError, match="no target ids"):
        lm.compute_loss(inputs, None, np.zeros((3, 5, 40), "float32"))
    with pytest.raises(ValueError, match="lacks encode"):
        Seq2SeqLM(kbert.models.bert_tiny(num_layers=1))
    with pytest.raises(ValueError, match="strategy must be one of"):
        lm.generate(inputs, strategy="nucleus")
