"""ElectraPretrainer: the task harness; sharing, sampling, labels, losses against NumPy, training,
the compiled call's own samples."""

import keras
import numpy as np
import pytest
from helpers import np_softmax, to_numpy, xla_call
from task_harness import TASK_CHECKS, paired_case, run_task_check

import kbert
from kbert.pretraining.electra_pretrainer import ElectraPretrainer

VOCAB = 60
DISCRIMINATOR = dict(
    vocabulary_size=VOCAB,
    num_layers=1,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_positions=32,
    dropout=0.0,
    use_pooler=False,
)
GENERATOR = dict(
    generator_num_layers=1,
    generator_hidden_dim=8,
    generator_num_heads=2,
    generator_intermediate_dim=16,
)
BATCH, LENGTH, PREDICTIONS, MASK_ID = 4, 16, 4, 3


def make_model(seed=1, discriminator_overrides=None, **overrides):
    discriminator = kbert.models.Encoder(**{**DISCRIMINATOR, **(discriminator_overrides or {})})
    return ElectraPretrainer(discriminator, **{**GENERATOR, "seed": seed, **overrides})


def make_batch(seed=0, batch=BATCH, length=LENGTH):
    """Masked batch; the last prediction slot is padding (position 0, weight 0)."""
    rng = np.random.default_rng(seed)
    lengths = length - rng.integers(0, 6, batch)
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    original = (rng.integers(5, VOCAB, (batch, length)) * padding_mask).astype("int32")
    original[:, 0] = 1
    positions = np.zeros((batch, PREDICTIONS), "int32")
    weights = np.zeros((batch, PREDICTIONS), "float32")
    for i in range(batch):
        positions[i, :-1] = rng.choice(np.arange(1, lengths[i]), PREDICTIONS - 1, replace=False)
        weights[i, :-1] = 1.0
    mask_ids = np.take_along_axis(original, positions, axis=1)
    mask_ids[:, -1] = 0
    token_ids = original.copy()
    np.put_along_axis(token_ids, positions[:, :-1], MASK_ID, axis=1)
    x = {
        "token_ids": token_ids,
        "segment_ids": np.zeros_like(token_ids),
        "padding_mask": padding_mask,
        "mask_positions": positions,
    }
    return x, {"mask_ids": mask_ids, "mask_weights": weights}


def test_generator_shares_the_discriminator_embeddings():
    model = make_model()
    discriminator = model.discriminator
    assert model.generator_embeddings is discriminator.embeddings
    assert model.generator_head.token_embedding is discriminator.token_embedding
    assert tuple(model.generator_projection.kernel.shape) == (16, 8)
    assert tuple(model.generator_head.transform.kernel.shape) == (8, 16)
    # Shared variables are counted once.
    assert len({id(v) for v in model.weights}) == len(model.weights)
    table_ids = {id(v) for v in discriminator.embeddings.weights}
    assert table_ids <= {id(v) for v in model.trainable_variables}


def test_factorized_embedding_needs_no_generator_projection():
    """ELECTRA-small shape: E=8 < H=16 = generator width; TextEmbedding's own E→H is shared."""
    model = make_model(discriminator_overrides={"embedding_dim": 8}, generator_hidden_dim=16)
    assert model.generator_projection is None
    assert tuple(model.generator_head.transform.kernel.shape) == (16, 8)
    x, _ = make_batch()
    assert tuple(model(x)["mlm_logits"].shape) == (BATCH, PREDICTIONS, VOCAB)


def test_labels_are_exactly_where_the_sample_differs_from_the_original():
    model = make_model()
    x, y = make_batch()
    y_pred = to_numpy(model(x))
    sampled = y_pred["sampled_ids"]
    assert sampled.shape == (BATCH, PREDICTIONS) and sampled.min() >= 0 and sampled.max() < VOCAB
    # Make one real slot's sample equal to its original: its label must be 0.
    y["mask_ids"][0, 0] = sampled[0, 0]

    expected_ids = x["token_ids"].copy()
    expected_labels = np.zeros((BATCH, LENGTH), "float32")
    for b in range(BATCH):
        for p in range(PREDICTIONS):
            position = x["mask_positions"][b, p]
            if position > 0:  # padding slots point at [CLS] and are not written
                expected_ids[b, position] = sampled[b, p]
            if y["mask_weights"][b, p] > 0:
                expected_labels[b, position] = float(sampled[b, p] != y["mask_ids"][b, p])
    np.testing.assert_array_equal(y_pred["discriminator_ids"], expected_ids)
    np.testing.assert_array_equal(y_pred["discriminator_ids"][:, 0], x["token_ids"][:, 0])
    labels = to_numpy(model.discriminator_labels(x, y, y_pred))
    np.testing.assert_array_equal(labels, expected_labels)
    assert labels[0, x["mask_positions"][0, 0]] == 0.0
    assert labels.sum() > 0


@pytest.mark.fast_paths_both_ways
def test_gumbel_max_sampling_follows_the_tempered_softmax():
    model = make_model(temperature=2.0)
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], "float32"))
    draws = to_numpy(model.sample(np.broadcast_to(logits, (1, 20000, 4))))
    frequencies = np.bincount(draws.reshape(-1), minlength=4) / draws.size
    np.testing.assert_allclose(frequencies, np_softmax(logits / 2.0), atol=0.015)


def test_loss_is_mlm_plus_50_times_the_detection_loss():
    model = make_model()
    x, y = make_batch()
    y_pred = model(x)
    loss = float(to_numpy(model.compute_loss(x, y, y_pred)))
    outputs = to_numpy(y_pred)
    w = y["mask_weights"]
    log_probs = np.log(np_softmax(outputs["mlm_logits"].astype(np.float64)))
    ce = -np.take_along_axis(log_probs, y["mask_ids"][..., None], axis=-1)[..., 0]
    mlm = (w * ce).sum() / (w.sum() + 1e-5)
    labels = to_numpy(model.discriminator_labels(x, y, outputs)).astype(np.float64)
    z = outputs["discriminator_logits"].astype(np.float64)
    probabilities = 1.0 / (1.0 + np.exp(-z))
    bce = -(labels * np.log(probabilities) + (1 - labels) * np.log(1 - probabilities))
    mask = x["padding_mask"]
    detection = (mask * bce).sum() / (mask.sum() + 1e-5)
    np.testing.assert_allclose(loss, mlm + 50.0 * detection, rtol=1e-5)
    tracked = float(model.discriminator_loss_tracker.result())
    np.testing.assert_allclose(tracked, detection, rtol=1e-5)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
@pytest.mark.slow(reason="enough steps for the loss to fall")
def test_short_training_run_lowers_the_loss():
    model = make_model()
    x, y = make_batch(batch=8)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(x, y, batch_size=8, epochs=40, verbose=0).history
    metrics = {"loss", "mlm_loss", "mlm_accuracy", "discriminator_loss", "discriminator_accuracy"}
    assert metrics <= set(history)
    losses = history["loss"]
    print(f"electra: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.5 * losses[0]
    assert history["mlm_loss"][-1] < history["mlm_loss"][0]


CASE = paired_case(
    lambda: make_model(discriminator_weight=20.0, temperature=0.5),
    make_batch,
    # The generator's logits are a function of the inputs; the samples, and all
    # that reads them, depend on the random state too.
    compared_outputs=("mlm_logits",),
)


@pytest.mark.parametrize("check", TASK_CHECKS)
def test_task_harness(check, tmp_path):
    run_task_check(check, CASE, tmp_path)


def test_sharing_survives_saving(tmp_path):
    model = make_model()
    path = tmp_path / "electra.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.generator_embeddings is restored.discriminator.embeddings
    assert restored.generator_head.token_embedding is restored.discriminator.token_embedding


def test_xla_compiled_call_is_consistent():
    """The generator matches eager; the discriminator reads the compiled call's own samples.

    (Random draws differ between XLA and eager on TensorFlow, so the sampled
    ids themselves are not compared.)
    """
    model = make_model()
    x, _ = make_batch()
    compiled = xla_call(model, x)
    eager = to_numpy(model(x))
    np.testing.assert_allclose(compiled["mlm_logits"], eager["mlm_logits"], atol=1e-5)
    expected_ids = x["token_ids"].copy()
    real = x["mask_positions"] > 0
    for b in range(BATCH):
        expected_ids[b, x["mask_positions"][b][real[b]]] = compiled["sampled_ids"][b][real[b]]
    np.testing.assert_array_equal(compiled["discriminator_ids"], expected_ids)
    sequence = model.discriminator(
        {**{k: x[k] for k in ("segment_ids", "padding_mask")}, "token_ids": expected_ids}
    )["sequence_output"]
    logits = model.discriminator_output(model.discriminator_dense(sequence))[..., 0]
    np.testing.assert_allclose(compiled["discriminator_logits"], to_numpy(logits), atol=1e-5)


def test_generator_width_must_divide_into_heads():
    with pytest.raises(ValueError, match="generator_hidden_dim=10 is not divisible by generator_num_heads=4"):
        make_model(generator_hidden_dim=10, generator_num_heads=4)


def test_mask_positions_of_wrong_rank_are_rejected():
    model = make_model()
    x, _ = make_batch()
    x["mask_positions"] = x["mask_positions"][:, :, None]
    with pytest.raises(ValueError, match=r"mask_positions' must have shape \(batch, predictions\)"):
        model(x)
