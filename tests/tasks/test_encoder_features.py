"""The feature-based route of the task models (`features=`): a frozen encoder's scalar mix
or last four layers against NumPy on its hidden states, frozen weights in `fit`, .keras
round trip, XLA, learning, bad input."""

import keras
import numpy as np
import pytest
from helpers import assert_close, dense_weights, np_dense, np_softmax, to_numpy, xla_call
from task_testing import fine_tune, keras_round_trip, random_inputs, tiny_encoder

from kbert.tasks import MultipleChoice, SpanQuestionAnswering, TextClassifier, TokenClassifier
from kbert.tasks.encoder_features import EncoderFeatures

BATCH, LAYERS, NUM_LABELS, WIDTH = 4, 4, 3, 16
ROUTES = ("scalar_mix", "scalar_mix_layer_norm", "last_four")


def _deep_encoder(**overrides):
    """A four-layer tiny BERT (last_four needs four layers), dropout on to show it is off."""
    return tiny_encoder(num_layers=LAYERS, dropout=overrides.pop("dropout", 0.3), **overrides)


def _hidden_states(backbone, x):
    """The encoder's `(batch, layers + 1, sequence, H)` hidden states, in float64."""
    internals = backbone.with_internals(attention_probabilities=False)
    return to_numpy(internals(x)["hidden_states"]).astype(np.float64)


def _np_features(route, states, padding_mask, mix=None):
    """NumPy features: ELMo's γ·Σ softmax(s)_j h_j (optionally layer-normed), or the last four concatenated."""
    if route == "last_four":
        return np.concatenate([states[:, j] for j in range(LAYERS - 3, LAYERS + 1)], axis=-1)
    if route == "scalar_mix_layer_norm":
        mask = padding_mask.astype(bool)
        normed = []
        for j in range(states.shape[1]):
            real = states[:, j][mask]  # (tokens, H): the statistics count real tokens only
            normed.append((states[:, j] - real.mean()) / np.sqrt(real.var() + 1e-13))
        states = np.stack(normed, axis=1)
    weights = np_softmax(to_numpy(mix.layer_weights).astype(np.float64))
    return float(to_numpy(mix.gamma)) * np.einsum("l,blsh->bsh", weights, states)


def _randomize_mix(model):
    """Set the mix's scalars away from their equal start, so the check sees the weighting."""
    mix = model.encoder_features.mix
    if mix is not None:
        mix.layer_weights.assign(np.array([0.5, -1.0, 2.0, 0.0, 1.0], "float32"))
        mix.gamma.assign(1.7)
    return mix


@pytest.mark.parametrize("route", ROUTES)
def test_token_logits_match_numpy_on_the_hidden_states(route):
    backbone = _deep_encoder()
    model = TokenClassifier(backbone, NUM_LABELS, features=route)
    mix = _randomize_mix(model)
    x = random_inputs(0, BATCH)
    features = _np_features(route, _hidden_states(backbone, x), x["padding_mask"], mix)
    expected = np_dense(features, *dense_weights(model.output_dense))
    assert_close(model(x), expected, atol=2e-5)  # float32 against float64
    # Dropout inside the frozen encoder is off: training changes nothing (head dropout 0.1 aside).
    model.dropout_layer.rate = 0.0
    assert_close(model(x, training=True), expected, atol=2e-5)


@pytest.mark.parametrize("hidden_activation", [None, "tanh"])
def test_text_classifier_reads_the_first_position(hidden_activation):
    backbone = _deep_encoder()
    model = TextClassifier(backbone, 3, hidden_activation=hidden_activation, features="scalar_mix")
    mix = _randomize_mix(model)
    x = random_inputs(1, BATCH)
    first = _np_features("scalar_mix", _hidden_states(backbone, x), x["padding_mask"], mix)[:, 0]
    if hidden_activation:
        first = np.tanh(np_dense(first, *dense_weights(model.hidden_dense)))
    assert_close(model(x), np_dense(first, *dense_weights(model.output_dense)), atol=2e-5)


def test_span_and_choice_heads_read_the_features_too():
    backbone = _deep_encoder()
    x = random_inputs(2, BATCH)
    features = _np_features("last_four", _hidden_states(backbone, x), x["padding_mask"])
    spans = SpanQuestionAnswering(backbone, features="last_four")
    logits = np_dense(features, *dense_weights(spans.span_dense))
    outputs = spans(x)
    real = x["padding_mask"] == 1
    assert_close(outputs["start_logits"][real], logits[..., 0][real], atol=2e-5)
    assert_close(outputs["end_logits"][real], logits[..., 1][real], atol=2e-5)

    choices = MultipleChoice(backbone, 2, features="last_four")
    paired = {name: value.reshape(BATCH // 2, 2, -1) for name, value in x.items()}
    expected = np_dense(features[:, 0], *dense_weights(choices.output_dense)).reshape(BATCH // 2, 2)
    assert_close(choices(paired), expected, atol=2e-5)


@pytest.mark.parametrize("route, head", [("scalar_mix", 4), ("last_four", 2), ("sequence_output", None)])
def test_only_the_mix_and_head_are_trainable(route, head):
    backbone = _deep_encoder()
    model = TokenClassifier(backbone, NUM_LABELS, features=route)
    if head is None:  # fine-tuning: everything trains, as before
        assert backbone.trainable and len(model.trainable_weights) == len(backbone.trainable_weights) + 2
        return
    assert not backbone.trainable and not backbone.trainable_weights
    assert len(model.trainable_weights) == head  # (layer_weights, gamma,) kernel, bias
    width = LAYERS * WIDTH if route == "last_four" else WIDTH
    assert tuple(model.output_dense.kernel.shape) == (width, NUM_LABELS)


def _tagging_data(seed, batch):
    """Each token's tag is its id mod 3; [CLS] and padding are left out."""
    x = random_inputs(seed, batch)
    labels = np.where(x["padding_mask"] == 1, x["token_ids"] % 3, -1).astype("int32")
    labels[:, 0] = -1
    return x, {"labels": labels}


@pytest.mark.parametrize("route", ["scalar_mix", "last_four"])
def test_fit_trains_the_head_and_leaves_the_encoder(route):
    # 64 wide: the 37 token ids' tags are then linearly separable in the frozen features.
    backbone = _deep_encoder(hidden_dim=64, intermediate_dim=64)
    model = TokenClassifier(backbone, NUM_LABELS, dropout=0.0, features=route)
    encoder_before = [to_numpy(w) for w in backbone.weights]
    head_before = [to_numpy(w) for w in model.trainable_weights]
    history = fine_tune(model, *_tagging_data(seed=10, batch=64), epochs=10)  # XLA on TF and JAX
    for before, weight in zip(encoder_before, backbone.weights):
        np.testing.assert_array_equal(to_numpy(weight), before, err_msg=weight.path)
    for before, weight in zip(head_before, model.trainable_weights):
        assert not np.allclose(to_numpy(weight), before), weight.path
    print(f"{route}: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}")
    assert history["loss"][-1] < 0.5 * history["loss"][0]  # chance: ln 3 = 1.10


def test_keras_file_round_trip(tmp_path):
    model = TokenClassifier(_deep_encoder(), NUM_LABELS, features="scalar_mix_layer_norm")
    _randomize_mix(model)
    assert model.get_config()["features"] == "scalar_mix_layer_norm"
    restored = keras_round_trip(model, random_inputs(3, BATCH), tmp_path)
    assert restored.features == "scalar_mix_layer_norm" and not restored.backbone.trainable
    assert len(restored.trainable_weights) == 4


def test_xla_call_matches_eager():
    model = TextClassifier(_deep_encoder(), 3, features="last_four")
    x = random_inputs(4, BATCH)
    assert_close(xla_call(model, x), model(x), atol=1e-5)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"features must be one of \['sequence_output', 'scalar_mix', "
                                         r"'scalar_mix_layer_norm', 'last_four'\]; received 'last_4'"):
        TokenClassifier(_deep_encoder(), NUM_LABELS, features="last_4")
    with pytest.raises(ValueError, match="'last_four' concatenates the last 4 layers; the encoder has "
                                         "only num_layers=2"):
        TextClassifier(tiny_encoder(num_layers=2), 3, features="last_four")
    with pytest.raises(ValueError, match="EncoderFeatures.'sequence_output'. is not called"):
        EncoderFeatures("sequence_output", num_layers=1, hidden_dim=4)(keras.ops.ones((1, 2, 3, 4)))
