"""kbert.checkpoints.t5_converter: tiny random `transformers` T5 models, saved
locally, imported with `kbert.from_huggingface`, compared logit for logit
and greedy token for token."""

import json

import keras
import numpy as np
import pytest

import kbert
from kbert.generation import Seq2SeqGenerator

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4
VERSIONS = {
    "v1_0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "v1_1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def hf_t5(version, **config):
    config = transformers.T5Config(
        vocab_size=99,
        d_model=16,
        d_kv=4,
        d_ff=24,
        num_layers=2,
        num_heads=3,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=12,
        decoder_start_token_id=0,
        **{**VERSIONS[version], **config},
    )
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)  # every tensor random, RMS scales included
    return model.eval()


def inputs():
    rng = np.random.default_rng(0)
    ids = rng.integers(2, 99, (3, 11)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = 0
    decoder = rng.integers(2, 99, (3, 20)).astype("int32")  # longer than max_distance
    decoder[:, 0] = 0
    decoder_mask = np.ones_like(decoder)
    decoder_mask[2, 13:] = 0
    return {
        "encoder_token_ids": ids,
        "encoder_padding_mask": mask,
        "decoder_token_ids": decoder,
        "decoder_padding_mask": decoder_mask,
    }


def logits_difference(hf_model, model):
    x = inputs()
    with torch.no_grad():
        expected = hf_model(
            input_ids=torch.tensor(x["encoder_token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(x["encoder_padding_mask"], dtype=torch.long),
            decoder_input_ids=torch.tensor(x["decoder_token_ids"], dtype=torch.long),
            decoder_attention_mask=torch.tensor(x["decoder_padding_mask"], dtype=torch.long),
            use_cache=False,
        ).logits.numpy()
    logits = keras.ops.convert_to_numpy(model(x)["logits"])
    real = x["decoder_padding_mask"].astype(bool)
    return float(np.abs(logits - expected)[real].max())


@pytest.fixture(scope="module", params=sorted(VERSIONS))
def converted(request, tmp_path_factory):
    """`(version, transformers model, kbert model imported from its saved checkpoint)`."""
    hf_model = hf_t5(request.param)
    path = tmp_path_factory.mktemp(request.param)
    hf_model.save_pretrained(path)
    return request.param, hf_model, kbert.from_huggingface(path)


@pytest.mark.fast_paths_both_ways
def test_logits_match_transformers(converted):
    version, hf_model, model = converted
    assert isinstance(model, kbert.models.T5)
    assert model.use_gated_activation == (version == "v1_1")
    assert model.tie_embeddings == (version == "v1_0")
    difference = logits_difference(hf_model, model)
    print(f"{keras.backend.backend()} t5 {version}: max abs logits diff {difference:.2e}")
    assert difference <= TOLERANCE


# One compiled loop is enough: decode_step shares the blocks and the head with
# decode, whose parity both versions check above.
@pytest.mark.fast_paths_both_ways
@pytest.mark.parametrize("converted", ["v1_0"], indirect=True)
def test_greedy_matches_transformers_generate(converted):
    version, hf_model, model = converted
    x = inputs()
    with torch.no_grad():
        expected = hf_model.generate(
            input_ids=torch.tensor(x["encoder_token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(x["encoder_padding_mask"], dtype=torch.long),
            max_new_tokens=16,
            do_sample=False,
            num_beams=1,
        ).numpy()[:, 1:]
    generated = Seq2SeqGenerator(model, max_new_tokens=16)(x)
    length = expected.shape[1]
    matched = int((generated[:, :length] == expected).sum())
    print(f"{keras.backend.backend()} t5 {version}: greedy tokens matching {matched}/{expected.size}")
    np.testing.assert_array_equal(generated[:, :length], expected)
    assert np.all(generated[:, length:] == 0)


def test_more_decoder_than_encoder_layers(tmp_path):
    hf_model = hf_t5("v1_0", num_decoder_layers=3)
    hf_model.save_pretrained(tmp_path)
    model = kbert.from_huggingface(tmp_path, dropout=0.0)
    assert model.num_decoder_layers == 3 and model.dropout == 0.0
    assert logits_difference(hf_model, model) <= TOLERANCE


def test_separate_lm_head_tensor_is_loaded(tmp_path):
    # A checkpoint as transformers 4 wrote v1.1 models: its own lm_head, no rescale.
    from safetensors.numpy import load_file, save_file

    hf_t5("v1_1").save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    head = np.random.default_rng(0).normal(size=tensors["shared.weight"].shape).astype("float32")
    save_file({**tensors, "lm_head.weight": head}, tmp_path / "model.safetensors")
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("scale_decoder_outputs")
    config["tie_word_embeddings"] = False
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = kbert.from_huggingface(tmp_path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.lm_head.kernel), head.T)


def test_rejects_unknown_feed_forward(tmp_path):
    hf_t5("v1_0").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["feed_forward_proj"] = "gated-mish"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="Unsupported T5 feed_forward_proj"):
        kbert.from_huggingface(tmp_path)
