import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    attention_weights,
    dense_weights,
    np_attention_mask,
    np_dense,
    np_gelu,
    np_gelu_tanh,
    np_layer_norm,
    np_multi_head_attention,
    padding_mask,
    random_floats,
    run_standard_check,
    to_numpy,
)
from keras import ops

from kbert.layers import LongformerAttention, MultiHeadAttention, EncoderBlock

BATCH, LENGTH, HIDDEN, HEADS, INTERMEDIATE = 2, 8, 16, 2, 32
LENGTHS = [LENGTH, 5]
WINDOW = 3  # wide enough that every query (padded ones too) keeps a real key


@keras.saving.register_keras_serializable(package="kbert_tests")
class WindowAttention(MultiHeadAttention):
    """A pluggable attention layer for the tests: keys farther than `window` are masked."""

    def __init__(self, window, **kwargs):
        super().__init__(**kwargs)
        self.window = int(window)

    def attend(self, query, key, value, mask=None, training=None):
        q_positions = ops.arange(ops.shape(query)[1])[:, None]
        k_positions = ops.arange(ops.shape(key)[1])[None, :]
        band = (ops.abs(q_positions - k_positions) <= self.window)[None, None]
        mask = band if mask is None else ops.logical_and(mask, band)
        return super().attend(query, key, value, mask=mask, training=training)

    def get_config(self):
        return {**super().get_config(), "window": self.window}


def window_band(length, window=WINDOW):
    positions = np.arange(length)
    return np.abs(positions[:, None] - positions[None, :]) <= window


def make_inputs(with_attention_mask=False):
    rng = np.random.default_rng(0)
    inputs = {
        "inputs": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
        "padding_mask": padding_mask(LENGTHS, LENGTH),
    }
    if with_attention_mask:
        inputs["attention_mask"] = np.tril(np.ones((BATCH, LENGTH, LENGTH), "int32"))
    return inputs


def post_ln_case():
    return LayerCase(
        make_layer=lambda: EncoderBlock(HEADS, INTERMEDIATE),
        inputs=make_inputs(),
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def pre_ln_case():
    return LayerCase(
        make_layer=lambda: EncoderBlock(HEADS, INTERMEDIATE, normalize_first=True),
        inputs=make_inputs(with_attention_mask=True),
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def custom_attention_case():
    return LayerCase(
        make_layer=lambda: EncoderBlock(
            HEADS,
            INTERMEDIATE,
            attention_layer=WindowAttention(WINDOW, num_heads=4, key_dim=4, name="attention"),
        ),
        inputs=make_inputs(),
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


CASES = {"post_ln": post_ln_case, "pre_ln": pre_ln_case, "custom_attention": custom_attention_case}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


def np_encoder_block(layer, x, mask, activation=np_gelu):
    """Post-LN: LN(x + MHA(x)), LN(x + FFN(x)); pre-LN: x + MHA(LN(x)), x + FFN(LN(x))."""
    attention = layer.attention_layer
    eps = layer.layer_norm_epsilon

    def norm(name, h):
        ln = getattr(layer, name)
        return np_layer_norm(h, to_numpy(ln.gamma), to_numpy(ln.beta), epsilon=eps)

    def mha(h):
        return np_multi_head_attention(
            h, h, attention_weights(attention), attention.num_heads, attention.key_dim,
            attention.value_dim, mask=mask, scale=attention.scale,
        )

    def ffn(h):
        hidden = activation(np_dense(h, *dense_weights(layer.intermediate_dense)))
        return np_dense(hidden, *dense_weights(layer.output_dense))

    x = np.asarray(x, np.float64)
    if layer.normalize_first:
        x = x + mha(norm("attention_layer_norm", x))
        return x + ffn(norm("output_layer_norm", x))
    x = norm("attention_layer_norm", x + mha(x))
    return norm("output_layer_norm", x + ffn(x))


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_matches_numpy_reference(case_name):
    case = CASES[case_name]()
    layer = case.make_layer()
    inputs = case.inputs
    outputs = to_numpy(case.call(layer, inputs, training=False))
    mask = np_attention_mask(
        BATCH, LENGTH, LENGTH, inputs["padding_mask"], inputs.get("attention_mask")
    )
    if case_name == "custom_attention":
        mask &= window_band(LENGTH)[None]
        assert isinstance(layer.attention_layer, WindowAttention)
    np.testing.assert_allclose(outputs, np_encoder_block(layer, inputs["inputs"], mask), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "activation, reference",
    [("gelu_approximate", np_gelu_tanh), ("relu", lambda h: np.maximum(h, 0.0))],
)
def test_other_activations_match_numpy(activation, reference):
    layer = EncoderBlock(HEADS, INTERMEDIATE, activation=activation)
    inputs = make_inputs()
    outputs = to_numpy(layer(inputs["inputs"], padding_mask=inputs["padding_mask"]))
    mask = np_attention_mask(BATCH, LENGTH, LENGTH, inputs["padding_mask"])
    expected = np_encoder_block(layer, inputs["inputs"], mask, activation=reference)
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_default_layer_norm_epsilon_is_bert_value():
    layer = EncoderBlock(HEADS, INTERMEDIATE)
    layer.build((BATCH, LENGTH, HIDDEN))
    assert layer.attention_layer_norm.epsilon == 1e-12
    assert layer.output_layer_norm.epsilon == 1e-12


@pytest.mark.parametrize("normalize_first", [False, True])
def test_padded_positions_never_influence_real_positions(normalize_first):
    rng = np.random.default_rng(3)
    layer = EncoderBlock(HEADS, INTERMEDIATE, normalize_first=normalize_first)
    inputs = make_inputs()
    x, mask = inputs["inputs"], inputs["padding_mask"]
    changed = x.copy()
    changed[1, 5:] = random_floats(rng, (LENGTH - 5, HIDDEN), scale=30.0)
    before = to_numpy(layer(x, padding_mask=mask))
    after = to_numpy(layer(changed, padding_mask=mask))
    np.testing.assert_allclose(after[1, :5], before[1, :5], atol=1e-6, rtol=0)
    np.testing.assert_allclose(after[0], before[0], atol=1e-6, rtol=0)


def test_dropout_only_in_training():
    layer = EncoderBlock(HEADS, INTERMEDIATE, dropout=0.5)
    inputs = make_inputs()
    inference = to_numpy(layer(inputs["inputs"], padding_mask=inputs["padding_mask"]))
    again = to_numpy(layer(inputs["inputs"], padding_mask=inputs["padding_mask"], training=False))
    np.testing.assert_allclose(again, inference, atol=0)
    trained = to_numpy(layer(inputs["inputs"], padding_mask=inputs["padding_mask"], training=True))
    assert np.all(np.isfinite(trained))
    assert np.abs(trained - inference).max() > 1e-3


def test_attention_dropout_defaults_to_dropout():
    assert EncoderBlock(HEADS, INTERMEDIATE, dropout=0.2).attention_dropout == 0.2
    layer = EncoderBlock(HEADS, INTERMEDIATE, dropout=0.2, attention_dropout=0.0)
    layer.build((BATCH, LENGTH, HIDDEN))
    assert layer.attention_layer.dropout == 0.0


def test_plugged_attention_layer_is_used_and_serialized():
    attention = WindowAttention(WINDOW, num_heads=4, key_dim=4, name="attention")
    layer = EncoderBlock(HEADS, INTERMEDIATE, attention_layer=attention)
    layer(make_inputs()["inputs"])
    assert layer.attention_layer is attention
    assert any(v is attention.query_dense.kernel for v in layer.weights)
    config = layer.get_config()
    assert config["attention_layer"]["registered_name"] == "kbert_tests>WindowAttention"
    clone = EncoderBlock.from_config(config)
    assert isinstance(clone.attention_layer, WindowAttention)
    assert clone.attention_layer.window == WINDOW


def test_global_attention_mask_reaches_an_attention_with_global_tokens():
    attention = LongformerAttention(num_heads=HEADS, key_dim=HIDDEN // HEADS, window=2, name="attention")
    assert attention.takes_global_attention_mask and not MultiHeadAttention.takes_global_attention_mask
    layer = EncoderBlock(HEADS, INTERMEDIATE, dropout=0.0, attention_layer=attention)
    inputs = make_inputs()
    x, mask = ops.convert_to_tensor(inputs["inputs"]), inputs["padding_mask"]
    global_mask = np.zeros((BATCH, LENGTH), "int32")
    global_mask[:, 0] = 1
    actual = to_numpy(layer(x, padding_mask=mask, global_attention_mask=global_mask))
    # The block by hand (post-LN, no dropout), its attention called with the global mask.
    h = layer.attention_layer_norm(x + attention(x, padding_mask=mask, global_attention_mask=global_mask))
    expected = to_numpy(layer.output_layer_norm(h + layer.output_dense(layer.intermediate_dense(h))))
    np.testing.assert_allclose(actual, expected, atol=1e-6)
    local_only = to_numpy(layer(x, padding_mask=mask))
    assert np.abs(actual - local_only)[mask.astype(bool)].max() > 1e-3


def test_unbuilt_default_layer_config_round_trip():
    layer = EncoderBlock(HEADS, INTERMEDIATE, activation="gelu_approximate", normalize_first=True)
    config = layer.get_config()
    assert config["attention_layer"] is None
    clone = EncoderBlock.from_config(config)
    assert clone.get_config() == config


def test_wrong_rank_raises():
    with pytest.raises(
        ValueError,
        match=r"EncoderBlock expects inputs of shape \(batch, sequence, hidden\); received shape \(2, 16\)",
    ):
        EncoderBlock(HEADS, INTERMEDIATE)(np.zeros((BATCH, HIDDEN), "float32"))


def test_hidden_not_divisible_by_heads_raises():
    with pytest.raises(ValueError, match=r"hidden size 16 is not divisible by num_heads=3"):
        EncoderBlock(3, INTERMEDIATE)(np.zeros((BATCH, LENGTH, HIDDEN), "float32"))


def test_masks_of_wrong_rank_raise():
    layer = EncoderBlock(HEADS, INTERMEDIATE)
    x = np.zeros((BATCH, LENGTH, HIDDEN), "float32")
    with pytest.raises(
        ValueError, match=r"padding_mask must have shape \(batch, sequence\); received shape \(2, 8, 8\)"
    ):
        layer(x, padding_mask=np.ones((BATCH, LENGTH, LENGTH), "int32"))
    with pytest.raises(
        ValueError, match=r"attention_mask must have shape \(batch, query, key\); received shape \(2, 8\)"
    ):
        layer(x, attention_mask=np.ones((BATCH, LENGTH), "int32"))


@pytest.mark.parametrize(
    "old_name, new_class",
    [("TransformerEncoder", "EncoderBlock"), ("T5EncoderBlock", "T5Block"),
     ("TransformerDecoder", "CrossAttentionDecoderBlock")],
)
def test_blocks_saved_under_their_old_names_still_load(old_name, new_class):
    import kbert.layers

    block = getattr(kbert.layers, new_class)(HEADS, INTERMEDIATE)
    serialized = keras.saving.serialize_keras_object(block)
    serialized.update(class_name=old_name, registered_name=f"kbert>{old_name}")
    loaded = keras.saving.deserialize_keras_object(serialized)
    assert type(loaded) is type(block) and loaded.get_config() == block.get_config()
