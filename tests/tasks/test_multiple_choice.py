"""MultipleChoice: the task harness; every encoder against the flattened backbone in NumPy,
the loss, choice-count errors, learning."""

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

from kbert.tasks import MultipleChoice

BATCH, CHOICES, LENGTH = 3, 4, 16


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_score_per_choice_on_every_encoder(family):
    backbone = tiny_encoder(family)
    model = MultipleChoice(backbone, CHOICES)
    x = random_inputs(0, BATCH, choices=CHOICES, num_segments=backbone.num_segments)
    logits = model(x)
    assert tuple(logits.shape) == (BATCH, CHOICES)
    flat = {name: value.reshape(BATCH * CHOICES, LENGTH) for name, value in x.items()}
    pooled = to_numpy(backbone(flat)["pooled_output"])
    expected = np_dense(pooled, *dense_weights(model.output_dense)).reshape(BATCH, CHOICES)
    assert_close(logits, expected, atol=1e-5)


def test_loss_and_accuracy_match_numpy():
    model = MultipleChoice(tiny_encoder(), CHOICES)
    # The last row only pads the batch (label -1): it counts nowhere.
    x, y = random_inputs(1, BATCH, choices=CHOICES), {"labels": np.array([3, 0, -1])}
    logits = to_numpy(model(x))
    loss = float(to_numpy(model.compute_loss(x, y, logits)))
    kept = y["labels"] >= 0
    expected = np_weighted_mean(np_cross_entropy(np.maximum(y["labels"], 0), logits), kept)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    hits = logits.argmax(-1) == y["labels"]
    assert float(model.accuracy.result()) == pytest.approx(hits[kept].mean())


def test_choice_counts_that_differ_are_rejected():
    model = MultipleChoice(tiny_encoder(), CHOICES)
    x = random_inputs(2, BATCH, choices=CHOICES + 1)
    with pytest.raises(ValueError, match=r"'token_ids' must have shape \(batch, num_choices=4"):
        model(x)
    x = random_inputs(2, BATCH, choices=CHOICES)
    x["padding_mask"] = x["padding_mask"][:, :3]
    with pytest.raises(ValueError, match=r"'padding_mask' .* received shape \(3, 3, 16\)"):
        model(x)
    with pytest.raises(ValueError, match=r"received shape \(3, 16\)"):
        model(random_inputs(2, BATCH))
    with pytest.raises(ValueError, match="MultipleChoice label 4 is outside the valid range"):
        x = random_inputs(2, BATCH, choices=CHOICES)
        model.compute_loss(x, {"labels": np.array([0, 4, 1])}, model(x))
    with pytest.raises(ValueError, match="num_choices must be an integer >= 2"):
        MultipleChoice(tiny_encoder(), 1)


CASE = TaskCase(
    lambda: MultipleChoice(tiny_encoder("albert"), CHOICES, dropout=0.2),
    lambda batch, length: random_inputs(length, batch, choices=CHOICES, length=length),
    make_targets=lambda x: {"labels": np.arange(len(x["token_ids"])) % CHOICES},
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def _marked_choice_data(seed, batch):
    """The right choice is the one whose tokens include the marker 7 (ids otherwise 8..39)."""
    x = random_inputs(seed, batch, choices=CHOICES)
    x["token_ids"] = np.where(x["token_ids"] > 2, x["token_ids"] % 32 + 8, x["token_ids"])
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CHOICES, batch).astype("int32")
    for i, label in enumerate(labels):
        length = x["padding_mask"][i, label].sum()
        x["token_ids"][i, label, rng.integers(1, length)] = 7
    return x, {"labels": labels}


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_fine_tune_learns_the_marked_choice():
    model = MultipleChoice(tiny_encoder(), CHOICES, dropout=0.0)
    history = fine_tune(model, *_marked_choice_data(seed=10, batch=128), epochs=4)
    x, y = _marked_choice_data(seed=11, batch=32)
    accuracy = (to_numpy(model(x)).argmax(-1) == y["labels"]).mean()
    print(f"multiple choice: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, "
          f"held-out accuracy {accuracy:.2f}")
    assert accuracy >= 0.85  # chance: 0.25
