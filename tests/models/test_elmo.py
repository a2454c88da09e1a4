"""ELMo's biLM: the backbone harness; a NumPy reference of the whole stack, the published size, bad input."""

import keras
import numpy as np
import pytest
from backbone_harness import BACKBONE_CHECKS, BackboneCase, run_backbone_check
from elmo_reference import np_character_cnn, np_projected_lstm
from helpers import padding_mask, random_floats, random_ids, to_numpy

import kbert
from kbert.layers.character_cnn import ELMO_FILTERS
from kbert.models import ELMo

SMALL = dict(hidden_dim=4, cell_dim=6, num_layers=2, filters=[(1, 3), (2, 4)], num_characters=40,
             max_characters=6, character_dim=3)


def _inputs(rng, lengths, sequence_length=5, num_characters=40, max_characters=6):
    return {
        "character_ids": random_ids(rng, (len(lengths), sequence_length, max_characters), num_characters),
        "padding_mask": padding_mask(lengths, sequence_length),
    }


def _randomize(model, rng):
    """Random weights, large enough that the clips (0.5 here) bite; returned by variable path."""
    weights = [random_floats(rng, w.shape, scale=0.7) for w in model.get_weights()]
    model.set_weights(weights)
    paths = [w.path for w in model.weights]
    return lambda suffix: next(value for path, value in zip(paths, weights) if path.endswith(suffix))


def np_elmo(inputs, weight, num_layers, filters, clip):
    """docs/algorithms.md §14: `[x; x]`, then `[→h_j; ←h_j]` with a residual from layer 2 on."""
    lengths = inputs["padding_mask"].sum(axis=1)
    encoder = "token_encoder/"
    tokens = np_character_cnn(
        inputs["character_ids"], weight("character_embedding/embeddings"),
        [(weight(f"kernel_{w}"), weight(f"bias_{w}")) for w, _ in filters],
        [(weight(f"highway_{i}/kernel"), weight(f"highway_{i}/bias")) for i in range(2)],
        (weight(encoder + "projection/kernel"), weight(encoder + "projection/bias")),
    ) * inputs["padding_mask"][:, :, None]
    layers, forward, backward = [np.concatenate([tokens, tokens], -1)], tokens, tokens
    for index in range(num_layers):
        outputs = []
        for direction, below in (("forward", forward), ("backward", backward)):
            lstm = [weight(f"{direction}_lstm_{index}/{name}")
                    for name in ("input_kernel", "recurrent_kernel", "bias", "projection_kernel")]
            output = np_projected_lstm(below, lengths, lstm, clip, clip, backwards=direction == "backward")
            outputs.append(output + below if index > 0 else output)
        forward, backward = outputs
        layers.append(np.concatenate([forward, backward], -1))
    return np.stack(layers, axis=1), forward, backward


def test_matches_numpy_with_random_weights_and_padding():
    rng = np.random.default_rng(0)
    model = ELMo(**SMALL, cell_clip=0.5, projection_clip=0.5)
    weight = _randomize(model, rng)
    inputs = _inputs(rng, [5, 3, 1])
    layers, forward, backward = np_elmo(inputs, weight, 2, SMALL["filters"], 0.5)
    outputs = to_numpy(model(inputs))
    # Tolerance: float32 through a char CNN and 2 LSTM layers of 5 steps (values of order 1).
    np.testing.assert_allclose(outputs["layer_outputs"], layers, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(outputs["forward_output"], forward, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(outputs["backward_output"], backward, atol=1e-4, rtol=1e-4)
    assert not outputs["layer_outputs"][1, :, 3:].any() and not outputs["layer_outputs"][2, :, 1:].any()


def _np_parameter_count(hidden, cells, layers, filters, characters=262, character_dim=16, highway=2):
    features = sum(count for _, count in filters)
    encoder = (characters * character_dim + sum(w * character_dim * c + c for w, c in filters)
               + highway * (features * 2 * features + 2 * features) + features * hidden + hidden)
    lstm = hidden * 4 * cells + hidden * 4 * cells + 4 * cells + cells * hidden
    return encoder + 2 * layers * lstm


def test_the_original_size_is_allennlp_s():
    """AllenNLP's elmo_2x4096_512_2048cnn_2xhighway: 93.6M parameters (softmax excluded)."""
    with keras.StatelessScope(initialize_variables=False):
        model = kbert.models.elmo_original()
    expected = _np_parameter_count(512, 4096, 2, ELMO_FILTERS)
    assert model.count_params() == expected == 93_600_864
    assert (model.hidden_dim, model.cell_dim, model.cell_clip, model.projection_clip) == (512, 4096, 3.0, 3.0)
    assert f"{expected:,}" in kbert.models.elmo_original.__doc__
    small = kbert.models.elmo_small()
    assert small.count_params() == _np_parameter_count(128, 512, 2, ELMO_FILTERS[:5])
    assert f"{small.count_params():,}" in kbert.models.elmo_small.__doc__


def harness_inputs(batch, length):
    """Random characters; every other row 2 tokens shorter."""
    rng = np.random.default_rng(length)
    return _inputs(rng, length - 2 * (np.arange(batch) % 2), sequence_length=length)


@pytest.mark.parametrize("check", BACKBONE_CHECKS)
def test_backbone_harness(check, tmp_path):
    # Short sequences: the LSTMs step through them one token at a time.
    case = BackboneCase(lambda: ELMo(**SMALL, dropout=0.1), harness_inputs, lengths=(3, 5))
    run_backbone_check(check, case, tmp_path)


def test_the_backward_states_see_the_future_and_the_forward_states_the_past():
    rng = np.random.default_rng(2)
    model = ELMo(**SMALL)
    inputs = _inputs(rng, [5])
    changed = {name: value.copy() for name, value in inputs.items()}
    changed["character_ids"][0, 3] = (changed["character_ids"][0, 3] + 1) % 40
    before, after = to_numpy(model(inputs)), to_numpy(model(changed))
    np.testing.assert_array_equal(before["forward_output"][0, :3], after["forward_output"][0, :3])
    np.testing.assert_array_equal(before["backward_output"][0, 4:], after["backward_output"][0, 4:])
    assert not np.allclose(before["backward_output"][0, :3], after["backward_output"][0, :3])


def test_bad_input_is_named():
    model = ELMo(**SMALL)
    rng = np.random.default_rng(3)
    inputs = _inputs(rng, [5])
    inputs["character_ids"][0, 1, 2] = 40
    with pytest.raises(ValueError, match="'character_ids' holds 40 at position \\(0, 1, 2\\)"):
        model(inputs)
    inputs = _inputs(rng, [5], max_characters=7)
    wrong_width = "'character_ids' of layer 'elmo' .* expected shape=\\(None, None, 6\\), found shape=\\(1, 5, 7\\)"
    with pytest.raises(ValueError, match=wrong_width):
        model(inputs)
    with pytest.raises(ValueError, match="dropout"):
        ELMo(**SMALL, dropout=1.5)


@pytest.mark.rotated(reason="a learning check: one backend per run of the suite (tests/conftest.py)")
def test_frozen_features_through_scalar_mix_train_a_token_head():
    """The feature-based route (docs/algorithms.md §14): frozen ELMo → ScalarMix → a token-level head."""
    from kbert.text import character_ids

    classes = {"cat": 0, "dog": 0, "bird": 0, "fish": 0, "ran": 1, "sat": 1, "sang": 1, "swam": 1,
               "the": 2, "a": 2, "red": 2, "big": 2}
    words = sorted(classes)
    rng = np.random.default_rng(4)
    lengths = rng.integers(3, 9, size=64)
    sentences = [[words[i] for i in rng.integers(0, len(words), size=n)] for n in lengths]
    inputs = {"character_ids": np.stack([character_ids(s, 8) for s in sentences]),
              "padding_mask": padding_mask(lengths, 8)}
    tags = np.array([[classes[w] for w in s] + [0] * (8 - len(s)) for s in sentences], "int32")

    elmo = ELMo(hidden_dim=16, cell_dim=16, filters=[(1, 16), (2, 16), (3, 16)])
    elmo.trainable = False
    frozen = [to_numpy(w) for w in elmo.weights]
    features = {name: keras.Input(value.shape[1:], dtype="int32", name=name) for name, value in inputs.items()}
    mix = kbert.layers.ScalarMix(num_layers=3, layer_norm=True)
    mixed = mix(elmo(features)["layer_outputs"], padding_mask=features["padding_mask"])
    model = keras.Model(features, keras.layers.Dense(3)(mixed))
    model.compile(optimizer=keras.optimizers.Adam(5e-2), weighted_metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.evaluate(inputs, tags, sample_weight=inputs["padding_mask"], return_dict=True, verbose=0)
    model.fit(inputs, tags, sample_weight=inputs["padding_mask"], epochs=100, batch_size=64, verbose=0)
    after = model.evaluate(inputs, tags, sample_weight=inputs["padding_mask"], return_dict=True, verbose=0)
    assert after["loss"] < 0.3 * before["loss"] and after["accuracy"] > 0.95, (before, after)
    assert [w.path for w in model.trainable_weights if "elmo" in w.path] == []
    for old, new in zip(frozen, elmo.weights):
        np.testing.assert_array_equal(to_numpy(new), old)
    assert not np.allclose(to_numpy(mix.layer_weights), 0.0) and float(to_numpy(mix.gamma)) != 1.0
