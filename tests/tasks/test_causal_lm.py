"""CausalLM: the task harness; the next-token loss against NumPy, training, generation through the task."""

import keras
import numpy as np
import pytest
from backbone_harness import causal_harness_inputs
from helpers import to_numpy
from task_harness import TASK_CHECKS, TaskCase, run_task_check

from kbert.generation import CausalLMGenerator
from kbert.models import GPT2, T5
from kbert.tasks import CausalLM

TINY = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=24,
            max_positions=32, dropout=0.0, end_id=0)


def batch():
    """4 texts: two left-padded, one right-padded, one full."""
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 40, (4, 8)).astype("int32")
    mask = np.ones_like(ids)
    mask[0, :3] = 0
    mask[1, :1] = 0
    mask[2, 6:] = 0
    ids[mask == 0] = 0
    return {"token_ids": ids, "padding_mask": mask}


def np_next_token_loss(logits, x, example_weights):
    """Mean CE of position t's logits against token t+1, where both tokens are real."""
    logits = logits[:, :-1].astype(np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, x["token_ids"][:, 1:, None], -1)[..., 0]
    weights = x["padding_mask"][:, :-1] * x["padding_mask"][:, 1:] * example_weights[:, None]
    return -(picked * weights).sum() / weights.sum()


@pytest.fixture(scope="module")
def lm():
    return CausalLM(GPT2(**TINY))


def test_outputs_are_the_backbone_logits(lm):
    x = batch()
    np.testing.assert_allclose(to_numpy(lm(x)), to_numpy(lm.backbone(x)["logits"]), atol=1e-6)


def test_compute_loss_predicts_the_next_real_token(lm):
    x = batch()
    logits = lm(x)
    loss = lm.compute_loss(x, None, logits)
    expected = np_next_token_loss(to_numpy(logits), x, np.ones(4))
    assert float(to_numpy(loss)) == pytest.approx(expected, rel=1e-4)
    weights = np.array([1.0, 0.5, 2.0, 0.0], "float32")
    weighted = lm.compute_loss(x, None, logits, sample_weight=weights)
    assert float(to_numpy(weighted)) == pytest.approx(
        np_next_token_loss(to_numpy(logits), x, weights), rel=1e-4
    )


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_fit_learns_and_reports_the_next_token_metrics():
    lm = CausalLM(GPT2(**TINY))
    lm.compile(optimizer=keras.optimizers.Adam(3e-2))
    history = lm.fit(batch(), batch_size=4, epochs=10, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.7 * losses[0]
    assert history.history["clm_accuracy"][-1] > history.history["clm_accuracy"][0]


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    # One layer: the smallest GPT-2 that takes every check's path.
    case = TaskCase(lambda: CausalLM(GPT2(**{**TINY, "num_layers": 1})), causal_harness_inputs)
    run_task_check(check, case, tmp_path)


def test_save_load_round_trip_then_generate(lm, tmp_path):
    path = str(tmp_path / "causal_lm.keras")
    lm.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, CausalLM) and isinstance(loaded.backbone, GPT2)
    np.testing.assert_allclose(to_numpy(loaded(batch())), to_numpy(lm(batch())), atol=1e-6)
    prompts = {key: value[:2] for key, value in batch().items()}  # left-padded rows
    generated = loaded.generate(prompts, max_new_tokens=5)
    np.testing.assert_array_equal(generated, CausalLMGenerator(lm.backbone, max_new_tokens=5)(prompts))
    assert loaded.generate(prompts, max_new_tokens=5) is not None and len(loaded._generators) == 1


def test_errors(lm):
    with pytest.raises(ValueError, match="pass no targets"):
        lm.compute_loss(batch(), batch()["token_ids"], lm(batch()))
    with pytest.raises(ValueError, match="lack"):
        lm({"token_ids": batch()["token_ids"]})
    with pytest.raises(ValueError, match="outside the allowed"):
        lm({"token_ids": np.full((1, 3), 40, "int32"), "padding_mask": np.ones((1, 3), "int32")})
    with pytest.raises(ValueError, match="decoder-only backbone"):
        CausalLM(T5(vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16))
