"""Tests for kbert.checkpoints.huggingface: tiny random `transformers` models,
saved locally, imported, and compared output for output."""

import json

import keras
import numpy as np
import pytest

import kbert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

# float32 on both sides; the differences are round-off only (measured <= 3e-7
# on TensorFlow, JAX and PyTorch), so 1e-4 leaves a wide margin.
TOLERANCE = 1e-4

_SIZES = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
)

# family -> (config class, model class, config keywords, pad id)
FAMILIES = {
    "bert": ("BertConfig", "BertModel", _SIZES, 0),
    "roberta": (
        "RobertaConfig",
        "RobertaModel",
        dict(_SIZES, type_vocab_size=1, layer_norm_eps=1e-5),
        1,
    ),
    "albert": (
        "AlbertConfig",
        "AlbertModel",
        dict(_SIZES, embedding_size=16, num_hidden_layers=3),
        0,
    ),
    "electra": ("ElectraConfig", "ElectraModel", dict(_SIZES, embedding_size=16), 0),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertModel",
        dict(
            vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64
        ),
        0,
    ),
}


def _randomize(model):
    """Random values for every parameter (LayerNorm scales and biases included),
    so a mix-up of any two tensors shows in the outputs."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    return model.eval()


def _tiny_model(family, model_class=None, **config):
    config_name, model_name, keywords, _ = FAMILIES[family]
    config = getattr(transformers, config_name)(**{**keywords, **config})
    return _randomize(getattr(transformers, model_class or model_name)(config))


def _inputs(pad_id, with_segments):
    """Three sequences of length 11: full, and right-padded after 7 and 3 tokens."""
    rng = np.random.default_rng(0)
    token_ids = rng.integers(3, 99, size=(3, 11)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[1, 7:] = 0
    padding_mask[2, 3:] = 0
    token_ids[padding_mask == 0] = pad_id
    inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
    if with_segments:
        segment_ids = np.zeros_like(token_ids)
        segment_ids[:, 5:] = 1
        inputs["segment_ids"] = segment_ids * padding_mask
    return inputs


def _compare(hf_model, backbone, pad_id=0):
    """Max abs differences (sequence, pooled or None) of the two models' outputs."""
    inputs = _inputs(pad_id, with_segments=backbone.num_segments > 1)
    if backbone.num_segments == 1:
        inputs["segment_ids"] = np.zeros_like(inputs["token_ids"])
    hf_inputs = {
        "input_ids": torch.tensor(inputs["token_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(inputs["padding_mask"], dtype=torch.long),
    }
    if "segment_ids" in inputs:
        hf_inputs["token_type_ids"] = torch.tensor(inputs["segment_ids"], dtype=torch.long)
    with torch.no_grad():
        expected = hf_model(**hf_inputs)
    outputs = backbone(inputs, training=False)
    sequence = keras.ops.convert_to_numpy(outputs["sequence_output"])
    sequence_diff = float(np.abs(sequence - expected.last_hidden_state.numpy()).max())
    pooled_diff = None
    if getattr(expected, "pooler_output", None) is not None:
        pooled = keras.ops.convert_to_numpy(outputs["pooled_output"])
        pooled_diff = float(np.abs(pooled - expected.pooler_output.numpy()).max())
    return sequence_diff, pooled_diff


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_outputs_match_transformers(family, tmp_path):
    hf_model = _tiny_model(family)
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path)

    assert isinstance(backbone, kbert.models.Encoder)
    assert backbone.use_pooler == (family in ("bert", "roberta", "albert"))
    sequence_diff, pooled_diff = _compare(hf_model, backbone, pad_id=FAMILIES[family][3])
    print(
        f"{keras.backend.backend()} {family}: max abs diff sequence "
        f"{sequence_diff:.2e}, pooled {pooled_diff}"
    )
    assert sequence_diff <= TOLERANCE
    if backbone.use_pooler:
        assert pooled_diff <= TOLERANCE


def test_config_mapping(tmp_path):
    _tiny_model("roberta", pad_token_id=3, hidden_act="gelu_new").save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path)
    assert backbone.position_offset == 4
    assert backbone.num_segments == 1
    assert backbone.activation == "gelu_approximate"
    assert backbone.layer_norm_epsilon == 1e-5
    assert backbone.max_positions == 64


def test_albert_shares_one_block(tmp_path):
    _tiny_model("albert").save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path)
    assert backbone.share_layers and backbone.num_layers == 3
    assert len({id(layer) for layer in backbone.transformer_layers}) == 1
    assert backbone.embedding_dim == 16


def test_overrides_apply(tmp_path):
    _tiny_model("bert").save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path, dropout=0.0, use_pooler=False)
    assert backbone.dropout == 0.0 and backbone.pooler is None


@pytest.mark.parametrize("dtype", ["bfloat16", "mixed_bfloat16"])
def test_dtype_override(dtype, tmp_path):
    hf_model = _tiny_model("bert")
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path, dtype=dtype)
    kernel = backbone.transformer_layers[0].attention_layer.query_dense.kernel
    assert kernel.dtype == ("bfloat16" if dtype == "bfloat16" else "float32")
    expected = hf_model.encoder.layer[0].attention.self.query.weight.detach().numpy().T
    actual = keras.ops.convert_to_numpy(keras.ops.cast(kernel, "float32"))
    np.testing.assert_allclose(actual, expected, rtol=1e-2, atol=1e-3)  # bfloat16 rounding
    outputs = backbone(_inputs(0, with_segments=True))
    assert keras.backend.standardize_dtype(outputs["sequence_output"].dtype) == "bfloat16"


def test_pytorch_bin_checkpoint(tmp_path):
    hf_model = _tiny_model("bert")
    hf_model.config.save_pretrained(tmp_path)
    torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")
    backbone = kbert.models.from_huggingface(tmp_path)
    sequence_diff, pooled_diff = _compare(hf_model, backbone)
    assert sequence_diff <= TOLERANCE and pooled_diff <= TOLERANCE


def test_sharded_safetensors(tmp_path):
    hf_model = _tiny_model("electra")
    hf_model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    backbone = kbert.models.from_huggingface(tmp_path)
    assert _compare(hf_model, backbone)[0] <= TOLERANCE


@pytest.mark.parametrize(
    "family, model_class, has_pooler",
    [
        ("bert", "BertForMaskedLM", False),
        ("bert", "BertForSequenceClassification", True),
        ("roberta", "RobertaForMaskedLM", False),
        ("albert", "AlbertForMaskedLM", False),
        ("albert", "AlbertForSequenceClassification", True),
        ("electra", "ElectraForPreTraining", False),
        ("distilbert", "DistilBertForSequenceClassification", False),
    ],
)
def test_task_checkpoint_loads_backbone(family, model_class, has_pooler, tmp_path):
    hf_model = _tiny_model(family, model_class)
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path)
    assert backbone.use_pooler == has_pooler
    base = getattr(hf_model, hf_model.base_model_prefix)
    sequence_diff, pooled_diff = _compare(base, backbone, pad_id=FAMILIES[family][3])
    assert sequence_diff <= TOLERANCE
    if has_pooler:
        assert pooled_diff <= TOLERANCE


@pytest.mark.parametrize("prefix", ["XLMRoberta", "Camembert"])
def test_roberta_architecture_aliases(prefix, tmp_path):
    config = getattr(transformers, prefix + "Config")(**FAMILIES["roberta"][2])
    hf_model = _randomize(getattr(transformers, prefix + "Model")(config))
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path)
    sequence_diff, pooled_diff = _compare(hf_model, backbone, pad_id=config.pad_token_id)
    assert sequence_diff <= TOLERANCE and pooled_diff <= TOLERANCE


@pytest.mark.parametrize("file_format", ["safetensors", "pytorch"])
def test_bfloat16_checkpoint(file_format, tmp_path):
    hf_model = _tiny_model("bert").to(torch.bfloat16)
    if file_format == "safetensors":
        hf_model.save_pretrained(tmp_path)
    else:
        hf_model.config.save_pretrained(tmp_path)
        torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")
    backbone = kbert.models.from_huggingface(tmp_path)
    assert str(backbone.dtype_policy.variable_dtype) == "float32"
    # Compared with the same bfloat16 weights widened to float32.
    sequence_diff, pooled_diff = _compare(hf_model.float(), backbone)
    assert sequence_diff <= TOLERANCE and pooled_diff <= TOLERANCE


def _rewrite_tensors(directory, edit):
    file = directory / "model.safetensors"
    tensors = safetensors_numpy.load_file(file)
    safetensors_numpy.save_file(edit(tensors), file, metadata={"format": "pt"})


def test_old_layer_norm_names_and_prefix(tmp_path):
    hf_model = _tiny_model("bert")
    hf_model.save_pretrained(tmp_path)

    def rename(tensors):
        renamed = {}
        for name, array in tensors.items():
            if "LayerNorm" in name:
                name = name.replace(".weight", ".gamma").replace(".bias", ".beta")
            renamed["bert." + name] = array
        return renamed

    _rewrite_tensors(tmp_path, rename)
    backbone = kbert.models.from_huggingface(tmp_path)
    sequence_diff, pooled_diff = _compare(hf_model, backbone)
    assert sequence_diff <= TOLERANCE and pooled_diff <= TOLERANCE


def test_missing_tensor_is_named(tmp_path):
    _tiny_model("bert").save_pretrained(tmp_path)
    name = "encoder.layer.1.output.dense.weight"
    _rewrite_tensors(tmp_path, lambda t: {k: v for k, v in t.items() if k != name})
    expected = r"encoder\.layer\.1\.output\.dense\.weight \(shape \(32, 37\)\)"
    with pytest.raises(ValueError, match=expected):
        kbert.models.from_huggingface(tmp_path)


def test_distilbert_sinusoidal_table_from_checkpoint(tmp_path):
    hf_model = _tiny_model("distilbert", sinusoidal_pos_embds=True)
    hf_model.save_pretrained(tmp_path)
    assert _compare(hf_model, kbert.models.from_huggingface(tmp_path))[0] <= TOLERANCE
    name = "embeddings.position_embeddings.weight"
    _rewrite_tensors(tmp_path, lambda t: {k: v for k, v in t.items() if k != name})
    with pytest.raises(ValueError, match=r"sinusoidal_pos_embds=True.*position_embeddings"):
        kbert.models.from_huggingface(tmp_path)


def test_shape_mismatch_names_both_shapes(tmp_path):
    _tiny_model("bert").save_pretrained(tmp_path)
    name = "embeddings.position_embeddings.weight"
    _rewrite_tensors(tmp_path, lambda t: {**t, name: t[name][:63]})
    with pytest.raises(ValueError) as error:
        kbert.models.from_huggingface(tmp_path)
    message = str(error.value)
    assert name in message and "(63, 32)" in message and "(64, 32)" in message
    assert "embeddings/position_embedding/embeddings" in message


def _write_config(directory, **config):
    (directory / "config.json").write_text(json.dumps(config))


def test_unknown_family(tmp_path):
    _write_config(tmp_path, model_type="gpt2")
    with pytest.raises(ValueError, match=r"'gpt2'.*'albert', 'bert'"):
        kbert.models.from_huggingface(tmp_path)


@pytest.mark.parametrize(
    "family, option, message",
    [
        ("bert", dict(position_embedding_type="relative_key"), "position_embedding_type"),
        ("bert", dict(is_decoder=True), "is_decoder"),
        ("albert", dict(num_hidden_groups=2), "num_hidden_groups=2"),
        ("albert", dict(inner_group_num=2), "inner_group_num=2"),
        ("albert", dict(embedding_size=32), "embedding_size == hidden_size"),
        ("electra", dict(hidden_act="quick_gelu"), "quick_gelu"),
    ],
)
def test_unsupported_config_options(family, option, message, tmp_path):
    _write_config(tmp_path, model_type=family, **{**FAMILIES[family][2], **option})
    with pytest.raises(ValueError, match=message):
        kbert.models.from_huggingface(tmp_path)


def test_missing_files(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        kbert.models.from_huggingface(missing)
    with pytest.raises(FileNotFoundError, match="config.json"):
        kbert.models.from_huggingface(tmp_path)
    _write_config(tmp_path, model_type="bert", **_SIZES)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        kbert.models.from_huggingface(tmp_path)
