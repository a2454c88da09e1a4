"""TokenClassifier: the task harness; every encoder, the masked loss against NumPy, learning."""

import numpy as np
import pytest
from helpers import assert_close, dense_weights, np_dense, to_numpy
from task_harness import TASK_CHECKS, TaskCase, run_task_check
from task_testing import (
    FAMILIES,
    fine_tune,
    np_cross_entropy,
    np_weighted_mean,
    random_inputs,
    tiny_encoder,
)

from kbert.tasks import TokenClassifier

BATCH, LENGTH, NUM_LABELS = 4, 16, 5


def _labels(x, seed):
    """Random tags on real tokens; -1 on [CLS], padding and every third token, -100 on some."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_LABELS, x["token_ids"].shape).astype("int32")
    labels[x["padding_mask"] == 0] = -1
    labels[:, 0] = -1
    labels[:, 2::3] = -1
    labels[:, 4] = -100  # Hugging Face's ignore index counts as left out too
    return labels


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_and_loss_on_every_encoder(family):
    backbone = tiny_encoder(family)
    model = TokenClassifier(backbone, NUM_LABELS)
    x = random_inputs(0, BATCH, num_segments=backbone.num_segments)
    logits = model(x)
    assert tuple(logits.shape) == (BATCH, LENGTH, NUM_LABELS)
    sequence = to_numpy(backbone(x)["sequence_output"])
    expected = np_dense(sequence, *dense_weights(model.output_dense))
    assert_close(logits, expected, atol=1e-5)
    assert np.isfinite(to_numpy(model.compute_loss(x, {"labels": _labels(x, 0)}, logits)))


def test_loss_and_accuracy_count_labelled_real_tokens_only():
    model = TokenClassifier(tiny_encoder(), NUM_LABELS)
    x = random_inputs(1, BATCH)
    labels = _labels(x, 1)
    labels[1, -1] = 3  # a label on padding: left out by the padding mask
    assert x["padding_mask"][1, -1] == 0
    logits = to_numpy(model(x))
    loss = float(to_numpy(model.compute_loss(x, {"labels": labels}, logits)))

    kept = (labels >= 0) & (x["padding_mask"] == 1)
    losses = np_cross_entropy(np.maximum(labels, 0), logits)
    np.testing.assert_allclose(loss, np_weighted_mean(losses, kept), rtol=1e-6)
    hits = logits.argmax(-1) == labels
    assert float(model.accuracy.result()) == pytest.approx(hits[kept].mean())

    garbage = logits.copy()
    garbage[~kept] = 100.0 * np.arange(NUM_LABELS)  # left-out tokens' logits do not matter
    relabelled = np.where(kept, labels, -7)
    again = model.compute_loss(x, {"labels": relabelled}, garbage)
    np.testing.assert_allclose(float(to_numpy(again)), loss, rtol=1e-6)


CASE = TaskCase(
    lambda: TokenClassifier(tiny_encoder("distilbert"), NUM_LABELS, dropout=0.3),
    lambda batch, length: random_inputs(length, batch, length=length, num_segments=0),
    make_targets=lambda x: {"labels": _labels(x, 0)},
    unmoved_variables=("pooler",),  # the head reads the sequence output
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def _tagging_data(seed, batch):
    """Each token's tag is its id mod 3; [CLS] and padding are left out."""
    x = random_inputs(seed, batch)
    labels = np.where(x["padding_mask"] == 1, x["token_ids"] % 3, -1).astype("int32")
    labels[:, 0] = -1
    return x, {"labels": labels}


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_fine_tune_learns_tags_from_token_ids():
    model = TokenClassifier(tiny_encoder(use_pooler=False), num_labels=3, dropout=0.0)
    history = fine_tune(model, *_tagging_data(seed=10, batch=64), epochs=6)
    x, y = _tagging_data(seed=11, batch=32)
    predicted = to_numpy(model(x)).argmax(-1)
    kept = y["labels"] >= 0
    accuracy = (predicted == y["labels"])[kept].mean()
    print(f"tagger: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, "
          f"held-out accuracy {accuracy:.2f}")
    assert accuracy >= 0.9  # chance: 1/3


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="num_labels must be an integer >= 2"):
        TokenClassifier(tiny_encoder(), num_labels=1)
    model = TokenClassifier(tiny_encoder(), NUM_LABELS)
    x = random_inputs(4, BATCH)
    logits = model(x)
    labels = _labels(x, 4)
    labels[0, 1] = NUM_LABELS
    with pytest.raises(ValueError, match="TokenClassifier label 5 is outside the valid range"):
        model.compute_loss(x, {"labels": labels}, logits)
    with pytest.raises(ValueError, match=r"labels must have shape \(batch, sequence\)"):
        model.compute_loss(x, {"labels": labels[:, 0]}, logits)
    with pytest.raises(ValueError, match=r"TokenClassifier inputs lack \['token_ids'\]"):
        model({"padding_mask": x["padding_mask"]})
