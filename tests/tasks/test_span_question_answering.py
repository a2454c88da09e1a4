"""SpanQuestionAnswering: the task harness; every encoder, masked logits and the loss against
NumPy, global questions on Longformer and BigBird, learning."""

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

from kbert.tasks import SpanQuestionAnswering

BATCH, LENGTH = 4, 16


def _question_mask(x, question_length=3):
    """1 on [CLS] and the first `question_length` tokens after it."""
    mask = np.zeros_like(x["token_ids"])
    mask[:, : question_length + 1] = 1
    return mask


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_masked_logits_on_every_encoder(family):
    backbone = tiny_encoder(family)
    model = SpanQuestionAnswering(backbone)
    x = random_inputs(0, BATCH, num_segments=backbone.num_segments)
    outputs = model(x)
    expected = np_dense(to_numpy(backbone(x)["sequence_output"]), *dense_weights(model.span_dense))
    real = x["padding_mask"] == 1
    assert not real.all()
    for index, name in enumerate(("start_logits", "end_logits")):
        logits = to_numpy(outputs[name])
        assert logits.shape == (BATCH, LENGTH) and logits.dtype == np.float32
        np.testing.assert_allclose(logits[real], expected[..., index][real], atol=1e-5)
        assert (logits[~real] == -1e9).all()


def test_loss_and_accuracies_match_numpy():
    model = SpanQuestionAnswering(tiny_encoder())
    x = random_inputs(1, BATCH)
    # The last row only pads the batch (positions -1): it counts nowhere.
    y = {"start_positions": np.array([0, 3, 5, -1]), "end_positions": np.array([0, 4, 7, -1])}
    y_pred = to_numpy(model(x))
    loss = float(to_numpy(model.compute_loss(x, y, y_pred)))
    kept = np.array([1, 1, 1, 0])
    start = np_cross_entropy(np.maximum(y["start_positions"], 0), y_pred["start_logits"])
    end = np_cross_entropy(np.maximum(y["end_positions"], 0), y_pred["end_logits"])
    expected = (np_weighted_mean(start, kept) + np_weighted_mean(end, kept)) / 2
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    for name, metric in (("start", model.start_accuracy), ("end", model.end_accuracy)):
        hits = y_pred[f"{name}_logits"].argmax(-1) == y[f"{name}_positions"]
        assert float(metric.result()) == pytest.approx(hits[:3].mean())


def test_longformer_question_tokens_are_global():
    # Wide initial weights, so that global tokens visibly change the logits.
    model = SpanQuestionAnswering(tiny_encoder("longformer", initializer_range=0.5))
    x = random_inputs(2, BATCH, num_segments=1)
    question = _question_mask(x)
    with_question = to_numpy(model({**x, "question_mask": question}))
    assert_close(with_question, model({**x, "global_attention_mask": question}), atol=0)
    without = to_numpy(model(x))
    assert np.abs(with_question["start_logits"] - without["start_logits"]).max() > 1e-2


def test_bigbird_question_must_sit_in_the_first_global_block():
    # Blocks of 2 tokens: [CLS] and one question token are global.
    model = SpanQuestionAnswering(tiny_encoder("bigbird"))
    x = random_inputs(3, BATCH)
    assert model.backbone.transformer_layers[0].attention_layer.block_size == 2
    assert_close(model({**x, "question_mask": _question_mask(x, 1)}), model(x), atol=0)
    with pytest.raises(ValueError, match="past BigBird's first global block"):
        model({**x, "question_mask": _question_mask(x, 2)})
    short = random_inputs(3, BATCH, length=12)  # full attention: every token is global
    model({**short, "question_mask": _question_mask(short, 5)})


def _question_inputs(batch, length):
    x = random_inputs(length, batch, length=length, num_segments=1)
    return {**x, "question_mask": _question_mask(x)}


CASE = TaskCase(
    lambda: SpanQuestionAnswering(tiny_encoder("longformer")),
    _question_inputs,
    lengths=(8, 16),  # multiples of the window (4)
    float32_outputs=("start_logits", "end_logits"),
    make_targets=lambda x: {"start_positions": np.arange(len(x["token_ids"])) % 4,
                            "end_positions": np.arange(len(x["token_ids"])) % 4 + 1},
    unmoved_variables=("pooler",),  # the head reads the sequence output
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def test_logits_are_float32_under_mixed_bfloat16():
    model = SpanQuestionAnswering(tiny_encoder(dtype="mixed_bfloat16"))
    x = random_inputs(7, BATCH)
    outputs = to_numpy(model(x))
    assert outputs["start_logits"].dtype == np.float32
    assert (outputs["end_logits"][x["padding_mask"] == 0] == -1e9).all()
    y = {"start_positions": np.array([0, 1, 2, 3]), "end_positions": np.array([0, 1, 3, 3])}
    assert np.isfinite(to_numpy(model.compute_loss(x, y, model(x))))


def _marker_spans(seed, batch):
    """The answer runs from token 7 to token 9 (0-3 tokens later); no markers: no answer (0, 0)."""
    x = random_inputs(seed, batch)
    x["token_ids"] = np.where(x["token_ids"] > 2, x["token_ids"] % 30 + 10, x["token_ids"])
    rng = np.random.default_rng(seed)
    starts, ends = np.zeros(batch, "int32"), np.zeros(batch, "int32")
    for i in range(batch):
        if rng.random() < 0.25:
            continue
        length = x["padding_mask"][i].sum()
        starts[i] = rng.integers(1, length - 3)
        ends[i] = starts[i] + rng.integers(0, 4)
        x["token_ids"][i, starts[i]] = 7
        x["token_ids"][i, ends[i]] = 9 if ends[i] > starts[i] else 7
    return x, {"start_positions": starts, "end_positions": ends}


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_fine_tune_learns_marked_spans():
    model = SpanQuestionAnswering(tiny_encoder(use_pooler=False))
    history = fine_tune(model, *_marker_spans(seed=10, batch=128), epochs=5)
    x, y = _marker_spans(seed=11, batch=64)
    predicted = to_numpy(model(x))
    exact = (predicted["start_logits"].argmax(-1) == y["start_positions"]) & (
        predicted["end_logits"].argmax(-1) == y["end_positions"]
    )
    print(f"span QA: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, "
          f"held-out exact spans {exact.mean():.2f}")
    assert exact.mean() >= 0.8  # chance: about 1/100


def test_bad_positions_are_named():
    model = SpanQuestionAnswering(tiny_encoder())
    x = random_inputs(6, BATCH)
    y_pred = model(x)
    bad = {"start_positions": np.array([0, 1, 2, LENGTH]), "end_positions": np.zeros(BATCH)}
    with pytest.raises(ValueError, match="SpanQuestionAnswering start_position 16 is outside"):
        model.compute_loss(x, bad, y_pred)
    with pytest.raises(ValueError, match=r"targets lack \['end_positions'\]"):
        model.compute_loss(x, {"start_positions": np.zeros(BATCH, "int32")}, y_pred)
