"""with_internals of an Encoder and a T5: hidden states and attention probabilities equal to transformers'."""

import keras
import numpy as np
import pytest
from helpers import to_numpy

import kbert
from kbert.models import BackboneInternals

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=37, max_position_embeddings=64)
# family -> a tiny config with eager attention (the one that returns probabilities)
CONFIGS = {
    "bert": lambda: transformers.BertConfig(**SIZES),
    "albert": lambda: transformers.AlbertConfig(**SIZES, embedding_size=16),
    "distilbert": lambda: transformers.DistilBertConfig(
        vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64),
}
TINY = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
            max_positions=32)


def batch(with_segments=True):
    rng = np.random.default_rng(0)
    token_ids = rng.integers(3, 50, (2, 9)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[1, 6:] = 0
    inputs = {"token_ids": token_ids * padding_mask, "padding_mask": padding_mask}
    if with_segments:
        inputs["segment_ids"] = np.zeros_like(token_ids)
    return inputs


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_internals_equal_transformers_outputs(family, tmp_path):
    config = CONFIGS[family]()
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    reference = transformers.AutoModel.from_config(config, attn_implementation="eager").eval()
    reference.save_pretrained(tmp_path)
    encoder = kbert.from_huggingface(tmp_path)
    inputs = batch(with_segments=encoder.num_segments > 0)
    outputs = encoder.with_internals()(inputs)
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
                             attention_mask=torch.tensor(inputs["padding_mask"]),
                             output_hidden_states=True, output_attentions=True)
    hidden = np.stack([h.numpy() for h in expected.hidden_states], axis=1)
    attention = np.stack([a.numpy() for a in expected.attentions], axis=1)
    # float32 on both sides: round-off only (measured <= 1e-6)
    np.testing.assert_allclose(to_numpy(outputs["hidden_states"]), hidden, atol=1e-5, rtol=0)
    np.testing.assert_allclose(to_numpy(outputs["attention_probabilities"]), attention, atol=1e-6, rtol=0)


def test_the_encoder_keeps_its_outputs_and_shares_its_weights():
    encoder = kbert.models.Encoder(**TINY, dropout=0.0)
    inside = encoder.with_internals(attention_probabilities=False)
    assert {id(v) for v in inside.weights} == {id(v) for v in encoder.weights}
    outputs, plain = inside.predict(batch(), verbose=0), encoder.predict(batch(), verbose=0)
    assert set(outputs) == {"sequence_output", "pooled_output", "hidden_states"}
    np.testing.assert_allclose(outputs["sequence_output"], plain["sequence_output"], atol=1e-5)
    np.testing.assert_allclose(outputs["hidden_states"][:, -1], plain["sequence_output"], atol=1e-5)
    assert set(encoder.output) == {"sequence_output", "pooled_output"}


def test_pre_ln_hidden_states_come_before_the_final_layer_norm():
    encoder = kbert.models.Encoder(**TINY, normalize_first=True, dropout=0.0)
    outputs = encoder.with_internals()(batch())
    last = encoder.final_layer_norm(outputs["hidden_states"][:, -1])
    np.testing.assert_allclose(to_numpy(last), to_numpy(outputs["sequence_output"]), atol=1e-5)
    probabilities = to_numpy(outputs["attention_probabilities"])
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-5)
    assert np.all(probabilities[1, :, :, :, 6:] == 0)  # padded keys get nothing


@pytest.mark.parametrize("attention, kwargs", [("bigbird", {"block_size": 2, "num_random_blocks": 1}),
                                               ("longformer", {"window": 3})])
def test_sparse_encoders_give_their_probabilities_as_a_dense_map(attention, kwargs):
    """Each layer's map is its attention layer's own (checked against NumPy in the layer tests)
    on that layer's input: sparse (zeros outside the pattern), rows summing to 1."""
    encoder = kbert.models.Encoder(**TINY, attention=attention, attention_kwargs=kwargs, dropout=0.0)
    inputs = {name: np.tile(value, (1, 3))[:, :20] for name, value in batch().items()}
    inputs["padding_mask"][1, 15:] = 0  # 20 tokens: 10 BigBird blocks, beyond full attention
    outputs = encoder.with_internals()(inputs)
    real = inputs["padding_mask"].astype(bool)  # a padding query may see no real key in its window
    np.testing.assert_allclose(to_numpy(outputs["hidden_states"][:, -1])[real],
                               to_numpy(encoder(inputs)["sequence_output"])[real], atol=1e-5)
    probabilities = to_numpy(outputs["attention_probabilities"])
    assert probabilities.shape == (2, 2, 2, 20, 20)
    np.testing.assert_allclose(probabilities.transpose(0, 3, 1, 2, 4).sum(axis=-1)[real], 1.0, atol=1e-5)
    for index, block in enumerate(encoder.transformer_layers):
        pattern = block.attention_layer.attention_pattern(20)
        assert np.all(probabilities[:, index][:, ~pattern] == 0) and not pattern.all()
        _, expected = block.attention_layer(outputs["hidden_states"][:, index],
                                            padding_mask=inputs["padding_mask"], return_probabilities=True)
        np.testing.assert_allclose(probabilities[:, index], to_numpy(expected), atol=1e-6)


def test_round_trip_and_input_checks(tmp_path):
    inside = kbert.models.Encoder(**TINY).with_internals()
    expected = inside.predict(batch(), verbose=0)
    inside.save(tmp_path / "inside.keras")
    restored = keras.saving.load_model(tmp_path / "inside.keras")
    assert isinstance(restored, BackboneInternals)
    for name, value in restored.predict(batch(), verbose=0).items():
        np.testing.assert_allclose(value, expected[name], atol=1e-6, err_msg=name)
    bad = dict(batch(), token_ids=np.full((2, 9), 50, "int32"))
    with pytest.raises(ValueError, match="token_ids"):
        inside(bad)
    with pytest.raises(ValueError, match=r"missing \['segment_ids'\]"):
        inside({"token_ids": batch()["token_ids"]})
    # The padding mask may be left out: nothing is padded (docs/architecture.md).
    unpadded = dict(batch(), padding_mask=np.ones((2, 9), "int32"))
    left_out = inside({"token_ids": unpadded["token_ids"], "segment_ids": unpadded["segment_ids"]})
    for name, value in inside(unpadded).items():
        np.testing.assert_allclose(to_numpy(left_out[name]), to_numpy(value), atol=1e-6, err_msg=name)


def t5_batch():
    rng = np.random.default_rng(0)
    encoder_ids = rng.integers(2, 99, (2, 9)).astype("int32")
    encoder_mask = np.ones_like(encoder_ids)
    encoder_mask[1, 5:] = 0
    decoder_ids = rng.integers(2, 99, (2, 6)).astype("int32")
    decoder_ids[:, 0] = 0
    return {"encoder_token_ids": encoder_ids * encoder_mask, "encoder_padding_mask": encoder_mask,
            "decoder_token_ids": decoder_ids, "decoder_padding_mask": np.ones_like(decoder_ids)}


@pytest.mark.parametrize("gated", [False, True], ids=["v1_0", "v1_1"])
def test_t5_internals_equal_transformers_outputs(gated, tmp_path):
    config = transformers.T5Config(
        vocab_size=99, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_heads=3,
        relative_attention_num_buckets=8, relative_attention_max_distance=12,
        decoder_start_token_id=0, feed_forward_proj="gated-gelu" if gated else "relu",
        tie_word_embeddings=not gated, attn_implementation="eager",
    )
    torch.manual_seed(0)
    reference = transformers.T5ForConditionalGeneration(config).eval()
    reference.save_pretrained(tmp_path)
    inputs = t5_batch()
    outputs = kbert.from_huggingface(tmp_path).with_internals()(inputs)
    with torch.no_grad():
        expected = reference(
            input_ids=torch.tensor(inputs["encoder_token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["encoder_padding_mask"]),
            decoder_input_ids=torch.tensor(inputs["decoder_token_ids"], dtype=torch.long),
            output_hidden_states=True, output_attentions=True, use_cache=False,
        )
    pairs = {
        "encoder_hidden_states": expected.encoder_hidden_states,
        "decoder_hidden_states": expected.decoder_hidden_states,
        "encoder_attention_probabilities": expected.encoder_attentions,
        "decoder_attention_probabilities": expected.decoder_attentions,
        "cross_attention_probabilities": expected.cross_attentions,
    }
    for name, tensors in pairs.items():  # float32 round-off only
        np.testing.assert_allclose(to_numpy(outputs[name]), np.stack([t.numpy() for t in tensors], 1),
                                   atol=1e-5, rtol=1e-5, err_msg=name)
