"""The biLM objective: the task harness; the shifted losses against NumPy, learning in a few steps,
bad targets."""

import keras
import numpy as np
import pytest
from helpers import np_softmax, padding_mask, random_ids, to_numpy
from task_harness import TASK_CHECKS, TaskCase, run_task_check

from kbert.models import ELMo
from kbert.pretraining import BiLMPretrainer, bilm_dataset, learn_word_vocabulary

TINY = dict(hidden_dim=8, cell_dim=16, num_layers=2, filters=[(1, 8), (2, 8), (3, 8)])
TEXT = ["the cat sat on the mat .\nthe dog sat on the log .\nthe cat ran to the dog ."] * 4


def _model(vocabulary_size=20):
    return BiLMPretrainer(ELMo(**TINY), vocabulary_size=vocabulary_size)


def _np_cross_entropy(logits, labels, weights):
    probabilities = np_softmax(np.asarray(logits, np.float64))
    picked = np.take_along_axis(probabilities, labels[..., None], axis=-1)[..., 0]
    return float((-np.log(picked) * weights).sum() / (weights.sum() + 1e-5))


def test_the_loss_is_the_mean_of_the_shifted_forward_and_backward_losses():
    rng = np.random.default_rng(0)
    model = _model()
    x = {"character_ids": random_ids(rng, (3, 6, 50), 262), "padding_mask": padding_mask([6, 4, 2], 6)}
    y = {"token_ids": random_ids(rng, (3, 6), 20)}
    y_pred = to_numpy(model(x))
    pairs = x["padding_mask"][:, 1:] * x["padding_mask"][:, :-1]
    forward = _np_cross_entropy(y_pred["forward_logits"][:, :-1], y["token_ids"][:, 1:], pairs)
    backward = _np_cross_entropy(y_pred["backward_logits"][:, 1:], y["token_ids"][:, :-1], pairs)
    loss = model.compute_loss(x=x, y=y, y_pred=model(x))
    assert float(to_numpy(loss)) == pytest.approx(0.5 * (forward + backward), abs=1e-5)
    assert float(to_numpy(model.forward_lm_loss_tracker.result())) == pytest.approx(forward, abs=1e-5)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
@pytest.mark.slow(reason="enough steps for both directions' losses to fall")
def test_a_few_steps_lower_the_loss_of_both_directions():
    vocabulary = learn_word_vocabulary(TEXT, 20)
    data = bilm_dataset(TEXT, vocabulary, sequence_length=9, batch_size=4, seed=0)
    model = _model(len(vocabulary))
    model.compile(optimizer=keras.optimizers.Adam(3e-2))
    batch = next(iter(data))
    before = model.evaluate(*batch, return_dict=True, verbose=0)
    model.fit(data, steps_per_epoch=40, epochs=1, verbose=0)
    after = model.evaluate(*batch, return_dict=True, verbose=0)
    for direction in ("forward_lm", "backward_lm"):
        assert after[f"{direction}_loss"] < 0.6 * before[f"{direction}_loss"], (before, after)


def _character_inputs(batch, length):
    rng = np.random.default_rng(length)
    lengths = length - 2 * (np.arange(batch) % 2)
    return {"character_ids": random_ids(rng, (batch, length, 50), 262), "padding_mask": padding_mask(lengths, length)}


CASE = TaskCase(
    _model,
    _character_inputs,
    lengths=(3, 5),  # short: the LSTMs step through them one token at a time
    make_targets=lambda x: {"token_ids": random_ids(np.random.default_rng(0), x["padding_mask"].shape, 20)},
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def test_bad_targets_and_inputs_are_named():
    model = _model()
    model.compile(optimizer="adam")
    x = {"character_ids": np.ones((2, 5, 50), "int32"), "padding_mask": np.ones((2, 5), "int32")}
    out_of_range = "'token_ids' holds 20 at position \\(0, 0\\), outside the allowed \\[0, 20\\)"
    with pytest.raises(ValueError, match=out_of_range):
        model.fit(x, {"token_ids": np.full((2, 5), 20, "int32")}, verbose=0)
    with pytest.raises(ValueError, match="BiLMPretrainer inputs lack \\['padding_mask'\\]"):
        model({"character_ids": x["character_ids"]})
