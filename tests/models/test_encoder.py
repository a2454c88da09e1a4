"""The Encoder backbone: the backbone harness on dense, ALBERT, BigBird and Longformer encoders;
dict I/O, the saved config, padding, bad input."""

import keras
import numpy as np
import pytest
from backbone_harness import BACKBONE_CHECKS, BackboneCase, check_config_round_trip, run_backbone_check
from helpers import to_numpy

import kbert
from kbert.models.backbone import Backbone

TINY = dict(
    vocabulary_size=50,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_positions=16,
)
SPARSE = {
    "bigbird": {"block_size": 2, "num_random_blocks": 1},  # sparse from 15 tokens on
    "longformer": {"window": 3},
}


def make_inputs(batch=2, length=8, num_segments=2, seed=0):
    """Random ids; every other row is 3 tokens shorter (right padding); segment 1 from the middle."""
    rng = np.random.default_rng(seed)
    lengths = length - 3 * (np.arange(batch) % 2)
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    inputs = {
        "token_ids": (rng.integers(1, TINY["vocabulary_size"], (batch, length)) * padding_mask).astype(
            "int32"
        ),
        "padding_mask": padding_mask,
    }
    if num_segments:
        second_half = np.arange(length)[None, :] >= length // 2
        segment_ids = second_half.astype("int32").repeat(batch, 0) * padding_mask
        inputs["segment_ids"] = np.minimum(segment_ids, num_segments - 1)
    return inputs


def sparse_inputs(attention, batch=2, length=20):
    """`make_inputs`, with tokens 0 and 9 global for Longformer."""
    inputs = make_inputs(batch, length)
    if attention == "longformer":
        inputs["global_attention_mask"] = np.zeros_like(inputs["token_ids"])
        inputs["global_attention_mask"][:, [0, 9]] = 1
    return inputs


def encoder_case(lengths=(8, 12), **variant):
    """A harness case of an Encoder with `variant`'s arguments (two shared layers, else one), at `lengths`."""
    arguments = {**TINY, "max_positions": 32 if "attention" in variant else 16, **variant}
    if not variant.get("share_layers"):
        arguments["num_layers"] = 1
    num_segments = variant.get("num_segments", 2)
    attention = variant.get("attention", "dense")
    if attention == "dense":
        def inputs(batch, length):
            return make_inputs(batch, length, num_segments=num_segments)
    else:
        def inputs(batch, length):
            return sparse_inputs(attention, batch, length)
    return BackboneCase(lambda: kbert.models.Encoder(**arguments), inputs, lengths=lengths)


def test_dict_inputs_and_outputs():
    model = kbert.models.Encoder(**TINY)
    assert set(model.input) == {"token_ids", "segment_ids", "padding_mask"}
    assert set(model.output) == {"sequence_output", "pooled_output"}
    outputs = model(make_inputs())
    assert tuple(outputs["sequence_output"].shape) == (2, 8, 16)
    assert tuple(outputs["pooled_output"].shape) == (2, 16)


def test_without_segments_or_pooler_the_pooled_output_is_the_first_token():
    model = kbert.models.Encoder(**TINY, num_segments=0, use_pooler=False)
    assert set(model.input) == {"token_ids", "padding_mask"}
    outputs = to_numpy(model(make_inputs(num_segments=0)))
    np.testing.assert_array_equal(outputs["pooled_output"], outputs["sequence_output"][:, 0])


def test_padding_never_influences_real_positions():
    model = kbert.models.Encoder(**TINY)
    inputs = make_inputs()
    changed = {key: value.copy() for key, value in inputs.items()}
    changed["token_ids"][1, -3:] = [7, 8, 9]
    first = to_numpy(model(inputs))["sequence_output"]
    second = to_numpy(model(changed))["sequence_output"]
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(first[real], second[real], atol=1e-6)
    assert not np.allclose(first[~real], second[~real])


# Dense attention runs with ALBERT's sharing here, and as BERT, RoBERTa, DistilBERT and
# ELECTRA encoders through the task harness (tests/tasks/).
BACKBONE_CASES = {
    "albert": encoder_case(embedding_dim=8, share_layers=True),
    "bigbird": encoder_case((16, 20), attention="bigbird", attention_kwargs=SPARSE["bigbird"]),
    "longformer": encoder_case((18, 24), attention="longformer", attention_kwargs=SPARSE["longformer"]),
}


@pytest.mark.parametrize("check", BACKBONE_CHECKS)
@pytest.mark.parametrize("variant", sorted(BACKBONE_CASES))
def test_backbone_harness(check, variant, tmp_path):
    run_backbone_check(check, BACKBONE_CASES[variant], tmp_path)


@pytest.mark.parametrize(
    "variant",
    [{}, {"normalize_first": True}, {"position_offset": 2, "num_segments": 1}],
    ids=["bert", "pre_ln", "roberta"],
)
def test_config_round_trip_of_the_other_variants(variant):
    check_config_round_trip(encoder_case(**variant))


# The keys of the configs that saved models carry: they must keep loading.
SAVED_CONFIG_KEYS = {
    "name", "trainable", "dtype", "vocabulary_size", "num_layers", "num_heads", "hidden_dim",
    "intermediate_dim", "max_positions", "num_segments", "embedding_dim", "share_layers",
    "position_offset", "dropout", "attention_dropout", "activation", "layer_norm_epsilon",
    "normalize_first", "use_pooler", "initializer_range", "attention", "attention_kwargs",
    "heads_per_layer", "attention_implementation", "dropout_prng",
}  # fmt: skip


def test_config_is_the_backbone_config_with_the_saved_keys():
    model = kbert.models.Encoder(**TINY, attention_dropout=0.0, dtype="mixed_bfloat16", name="tiny")
    assert isinstance(model, Backbone)
    config = model.get_config()
    assert set(config) == SAVED_CONFIG_KEYS
    assert config["name"] == "tiny" and config["attention_dropout"] == 0.0
    clone = kbert.models.Encoder.from_config(config)
    assert clone.dtype_policy.name == "mixed_bfloat16" and clone.get_config() == config


def test_sequence_longer_than_the_position_table_is_rejected():
    model = kbert.models.Encoder(**TINY)
    with pytest.raises(ValueError, match="Sequence length 20 exceeds the 16 positions"):
        model(make_inputs(length=20))


def test_roberta_offset_reduces_the_usable_length():
    model = kbert.models.Encoder(**TINY, position_offset=2, num_segments=1)
    model(make_inputs(length=14, num_segments=1))
    with pytest.raises(ValueError, match="Sequence length 15 exceeds the 14 positions.*offset 2"):
        model(make_inputs(length=15, num_segments=1))


def test_token_ids_outside_the_vocabulary_are_rejected_in_eager_mode():
    model = kbert.models.Encoder(**TINY)
    inputs = make_inputs()
    inputs["token_ids"][0, 1] = TINY["vocabulary_size"]
    expected = "'token_ids' holds 50 at position \\(0, 1\\), outside the allowed \\[0, 50\\)"
    with pytest.raises(ValueError, match=expected):
        model(inputs)


def test_wrong_rank_is_rejected():
    model = kbert.models.Encoder(**TINY)
    unbatched = {key: value[0] for key, value in make_inputs().items()}
    with pytest.raises(ValueError, match="'token_ids' must have shape \\(batch, sequence\\)"):
        model(unbatched)


def test_hidden_size_must_divide_into_heads():
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        kbert.models.Encoder(**{**TINY, "num_heads": 3})


def test_unknown_attention_is_rejected():
    with pytest.raises(ValueError, match="attention must be one of .*received 'sparse'"):
        kbert.models.Encoder(**TINY, attention="sparse")


@pytest.mark.parametrize("attention", sorted(SPARSE))
def test_sparse_attention_encoder_ignores_padding(attention):
    model = kbert.models.Encoder(
        **dict(TINY, max_positions=32), attention=attention, attention_kwargs=SPARSE[attention]
    )
    assert type(model.transformer_layers[0].attention_layer) is kbert.models.ATTENTION_LAYERS[attention]
    assert ("global_attention_mask" in model.input) == (attention == "longformer")
    inputs = sparse_inputs(attention)
    expected = to_numpy(model(inputs))

    changed = {key: value.copy() for key, value in inputs.items()}
    changed["token_ids"][1, -3:] = [7, 8, 9]
    real = inputs["padding_mask"].astype(bool)
    second = to_numpy(model(changed))["sequence_output"]
    np.testing.assert_allclose(second[real], expected["sequence_output"][real], atol=1e-6)

    if attention == "longformer":  # the global_attention_mask input is optional
        local = to_numpy(model(make_inputs(length=20)))["sequence_output"]
        no_global = dict(inputs, global_attention_mask=np.zeros_like(inputs["token_ids"]))
        np.testing.assert_allclose(
            to_numpy(model(no_global))["sequence_output"][real], local[real], atol=1e-6
        )
        assert np.abs(expected["sequence_output"] - local).max() > 1e-3


def test_left_out_global_attention_mask_works_in_predict_and_in_a_functional_graph():
    # Keras refuses a dict without an optional input's key, on every backend;
    # the encoder fills it (and `predict` on JAX calls `call`, not `__call__`).
    model = kbert.models.Encoder(
        **dict(TINY, max_positions=32), attention="longformer", attention_kwargs=SPARSE["longformer"]
    )
    inputs = make_inputs(length=20)
    real = inputs["padding_mask"].astype(bool)
    expected = to_numpy(model(inputs))["sequence_output"][real]
    predicted = model.predict(inputs, verbose=0)["sequence_output"]
    np.testing.assert_allclose(predicted[real], expected, atol=1e-5)
    symbolic = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in inputs}
    wrapper = keras.Model(symbolic, model(symbolic)["sequence_output"])
    np.testing.assert_allclose(to_numpy(wrapper(inputs))[real], expected, atol=1e-5)


def test_per_layer_attention_kwargs():
    model = kbert.models.Encoder(
        **TINY, attention="longformer", attention_kwargs=[{"window": 2}, {"window": 5}]
    )
    assert [layer.attention_layer.window for layer in model.transformer_layers] == [2, 5]
    with pytest.raises(ValueError, match="3 per-layer entries for num_layers=2"):
        kbert.models.Encoder(**TINY, attention_kwargs=[{}, {}, {}])
