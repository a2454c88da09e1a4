"""kbert.checkpoints.bart_converter: tiny random `transformers` BART models, saved
locally, imported with `kbert.from_huggingface`, compared logit for logit
and greedy token for token."""

import json

import keras
import numpy as np
import pytest

import kbert
from kbert.generation import Seq2SeqGenerator
from kbert.tasks import Seq2SeqLM

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4
VOCABULARY = 99


def hf_bart(**config):
    config = transformers.BartConfig(
        vocab_size=VOCABULARY,
        d_model=16,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=24,
        decoder_ffn_dim=24,
        max_position_embeddings=32,
        forced_eos_token_id=None,
        **config,
    )
    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)  # every tensor random, LayerNorm scales included
        model.final_logits_bias.normal_(0.0, 0.5)  # a buffer, not a parameter
    return model.eval()


def inputs():
    rng = np.random.default_rng(0)
    ids = rng.integers(3, VOCABULARY, (3, 11)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = 1
    decoder = rng.integers(3, VOCABULARY, (3, 20)).astype("int32")
    decoder[:, 0] = 2
    decoder_mask = np.ones_like(decoder)
    decoder_mask[2, 13:] = 0
    return {
        "encoder_token_ids": ids,
        "encoder_padding_mask": mask,
        "decoder_token_ids": decoder,
        "decoder_padding_mask": decoder_mask,
    }


def hf_logits(hf_model, x):
    with torch.no_grad():
        return hf_model(
            input_ids=torch.tensor(x["encoder_token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(x["encoder_padding_mask"], dtype=torch.long),
            decoder_input_ids=torch.tensor(x["decoder_token_ids"], dtype=torch.long),
            decoder_attention_mask=torch.tensor(x["decoder_padding_mask"], dtype=torch.long),
            use_cache=False,
        ).logits.numpy()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """`(transformers model, kbert model imported from its saved checkpoint, path)`."""
    hf_model = hf_bart()
    path = tmp_path_factory.mktemp("bart")
    hf_model.save_pretrained(path)
    return hf_model, kbert.from_huggingface(path), path


@pytest.mark.fast_paths_both_ways
@pytest.mark.slow(reason="a transformers BART built and run beside kbert's (JAX compiles its eager operations)")
def test_logits_match_transformers(converted):
    hf_model, model, _ = converted
    assert isinstance(model, kbert.models.BART)
    assert (model.num_layers, model.num_decoder_layers, model.max_positions) == (2, 3, 32)
    x = inputs()
    logits = keras.ops.convert_to_numpy(model(x)["logits"])
    real = x["decoder_padding_mask"].astype(bool)
    difference = float(np.abs(logits - hf_logits(hf_model, x))[real].max())
    print(f"{keras.backend.backend()} bart: max abs logits diff {difference:.2e}")
    assert difference <= TOLERANCE


def test_longest_sequence_reads_the_last_position_row(converted):
    hf_model, model, _ = converted
    x = inputs()
    x = {name: np.tile(array, (1, 3))[:, :32] for name, array in x.items()}
    logits = keras.ops.convert_to_numpy(model(x)["logits"])
    real = x["decoder_padding_mask"].astype(bool)
    assert np.abs(logits - hf_logits(hf_model, x))[real].max() <= TOLERANCE


@pytest.mark.fast_paths_both_ways
def test_greedy_matches_transformers_generate(converted):
    hf_model, model, _ = converted
    x = inputs()
    with torch.no_grad():
        expected = hf_model.generate(
            input_ids=torch.tensor(x["encoder_token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(x["encoder_padding_mask"], dtype=torch.long),
            max_new_tokens=16,
            do_sample=False,
            num_beams=1,
        ).numpy()
    assert np.all(expected[:, 0] == 2)  # decoder_start_token_id
    expected = expected[:, 1:]
    generated = Seq2SeqLM(model).generate(x, max_new_tokens=16)
    length = expected.shape[1]
    matched = int((generated[:, :length] == expected).sum())
    print(f"{keras.backend.backend()} bart: greedy tokens matching {matched}/{expected.size}")
    np.testing.assert_array_equal(generated[:, :length], expected)
    assert np.all(generated[:, length:] == 1)


def test_uncached_generation_equals_cached(converted):
    _, model, _ = converted
    x = inputs()
    cached = Seq2SeqGenerator(model, max_new_tokens=8)(x)
    uncached = Seq2SeqGenerator(model, max_new_tokens=8, use_cache=False)(x)
    np.testing.assert_array_equal(cached, uncached)


def test_bare_bart_model_loads_with_a_zero_logits_bias(tmp_path):
    hf_model = hf_bart()
    hf_model.model.save_pretrained(tmp_path)
    model = kbert.from_huggingface(tmp_path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.lm_head.bias), 0.0)
    with torch.no_grad():
        hf_model.final_logits_bias.zero_()
    x = inputs()
    logits = keras.ops.convert_to_numpy(model(x)["logits"])
    real = x["decoder_padding_mask"].astype(bool)
    assert np.abs(logits - hf_logits(hf_model, x))[real].max() <= TOLERANCE


@pytest.mark.parametrize(
    "change, message",
    [
        ({"normalize_before": True}, "normalize_before"),
        ({"add_final_layer_norm": True}, "add_final_layer_norm"),
        ({"decoder_attention_heads": 2}, "encoder_attention_heads and decoder_attention_heads"),
        ({"decoder_ffn_dim": 8}, "encoder_ffn_dim and decoder_ffn_dim"),
        ({"pad_token_id": 0}, "pad 1"),
        ({"activation_function": "quick_gelu"}, "quick_gelu"),
    ],
)
def test_unsupported_configs_are_refused(converted, tmp_path, change, message):
    _, _, path = converted
    config = json.loads((path / "config.json").read_text())
    config.update(change)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match=message):
        kbert.from_huggingface(tmp_path)
