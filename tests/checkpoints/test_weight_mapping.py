"""kbert.checkpoints.weight_mapping: reading the weight files, naming and assigning tensors."""

import keras
import numpy as np
import pytest
from bert_family_checkpoints import (
    TOLERANCE,
    compare,
    rewrite_tensors,
    safetensors_numpy,
    tiny_model,
    torch,
)

import kbert
from kbert.checkpoints.weight_mapping import (
    assign_tensors,
    kbert_activation,
    layer_tensor_names,
    lookup_tensor,
    read_config,
    read_tensors,
    resolve_sublayer,
    strip_prefix,
)
from kbert.layers import RMSNormalization


def test_pytorch_bin_checkpoint(tmp_path):
    hf_model = tiny_model("bert")
    hf_model.config.save_pretrained(tmp_path)
    torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")
    backbone = kbert.from_huggingface(tmp_path)
    sequence_diff, pooled_diff = compare(hf_model, backbone)
    assert sequence_diff <= TOLERANCE and pooled_diff <= TOLERANCE


def test_sharded_safetensors(tmp_path):
    hf_model = tiny_model("electra")
    hf_model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    backbone = kbert.from_huggingface(tmp_path)
    assert compare(hf_model, backbone)[0] <= TOLERANCE


def test_read_tensors_merges_shards(tmp_path):
    hf_model = tiny_model("electra")
    hf_model.save_pretrained(tmp_path, max_shard_size="20KB")
    tensors = read_tensors(tmp_path)
    state = hf_model.state_dict()
    assert sorted(tensors) == sorted(state)
    name = "encoder.layer.1.output.dense.weight"
    np.testing.assert_array_equal(tensors[name], state[name].numpy())


@pytest.mark.parametrize("file_format", ["safetensors", "pytorch"])
def test_bfloat16_checkpoint(file_format, tmp_path):
    hf_model = tiny_model("bert").to(torch.bfloat16)
    if file_format == "safetensors":
        hf_model.save_pretrained(tmp_path)
    else:
        hf_model.config.save_pretrained(tmp_path)
        torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")
    backbone = kbert.from_huggingface(tmp_path)
    assert str(backbone.dtype_policy.variable_dtype) == "float32"
    # Compared with the same bfloat16 weights widened to float32.
    sequence_diff, pooled_diff = compare(hf_model.float(), backbone)
    assert sequence_diff <= TOLERANCE and pooled_diff <= TOLERANCE


def test_old_layer_norm_names_and_prefix(tmp_path):
    hf_model = tiny_model("bert")
    hf_model.save_pretrained(tmp_path)

    def rename(tensors):
        renamed = {}
        for name, array in tensors.items():
            if "LayerNorm" in name:
                name = name.replace(".weight", ".gamma").replace(".bias", ".beta")
            renamed["bert." + name] = array
        return renamed

    rewrite_tensors(tmp_path, rename)
    backbone = kbert.from_huggingface(tmp_path)
    sequence_diff, pooled_diff = compare(hf_model, backbone)
    assert sequence_diff <= TOLERANCE and pooled_diff <= TOLERANCE


def test_missing_tensor_is_named(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    name = "encoder.layer.1.output.dense.weight"
    rewrite_tensors(tmp_path, lambda t: {k: v for k, v in t.items() if k != name})
    expected = r"encoder\.layer\.1\.output\.dense\.weight \(shape \(32, 37\)\)"
    with pytest.raises(ValueError, match=expected):
        kbert.from_huggingface(tmp_path)


def test_shape_mismatch_names_both_shapes(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    name = "embeddings.position_embeddings.weight"
    rewrite_tensors(tmp_path, lambda t: {**t, name: t[name][:63]})
    with pytest.raises(ValueError) as error:
        kbert.from_huggingface(tmp_path)
    message = str(error.value)
    assert name in message and "(63, 32)" in message and "(64, 32)" in message
    assert "embeddings/position_embedding/embeddings" in message


def _dense_and_norms():
    """A functional model with a Dense, a LayerNormalization and an RMSNormalization."""
    x = keras.Input((3,))
    y = keras.layers.Dense(2, name="dense")(x)
    y = keras.layers.LayerNormalization(name="layer_norm")(y)
    y = RMSNormalization(name="rms_norm")(y)
    return keras.Model(x, y)


def _names(model):
    names = {}
    for layer, module in [(model.layers[1], "fc"), (model.layers[2], "LayerNorm"), (model.layers[3], "rms")]:
        names.update(layer_tensor_names(layer, module))
    return names


def test_layer_tensor_names_and_assignment():
    model = _dense_and_norms()
    names = _names(model)
    assert names == {
        "dense/kernel": ("fc.weight", True),
        "dense/bias": ("fc.bias", False),
        "layer_norm/gamma": ("LayerNorm.weight", False),
        "layer_norm/beta": ("LayerNorm.bias", False),
        "rms_norm/scale": ("rms.weight", False),
    }
    rng = np.random.default_rng(0)
    tensors = {
        "fc.weight": rng.normal(size=(2, 3)),  # [out, in], float64: cast to float32
        "fc.bias": rng.normal(size=(2,)).astype("float16"),
        "LayerNorm.gamma": rng.normal(size=(2,)).astype("float32"),  # an old LayerNorm name
        "LayerNorm.beta": rng.normal(size=(2,)).astype("float32"),
        "rms.weight": rng.normal(size=(2,)).astype("float32"),
    }
    assign_tensors(model, names, tensors)
    kernel, bias, gamma, beta, scale = (keras.ops.convert_to_numpy(w) for w in model.weights)
    np.testing.assert_allclose(kernel, tensors["fc.weight"].T, rtol=1e-6)
    np.testing.assert_array_equal(bias, tensors["fc.bias"].astype("float32"))
    np.testing.assert_array_equal(gamma, tensors["LayerNorm.gamma"])
    np.testing.assert_array_equal(scale, tensors["rms.weight"])


def test_assign_tensors_refuses_a_variable_without_a_name():
    model = _dense_and_norms()
    names = _names(model)
    del names["rms_norm/scale"]
    with pytest.raises(RuntimeError, match=r"without a Hugging Face name: \['rms_norm/scale'\]"):
        assign_tensors(model, names, {})


def test_assign_tensors_names_what_is_missing():
    model = _dense_and_norms()
    with pytest.raises(
        ValueError, match=r"^The checkpoint lacks 5 tensor\(s\) the model needs: fc.weight \(shape \(2, 3\)\)"
    ):
        assign_tensors(model, _names(model), {"other": 1})


def test_lookup_and_prefix():
    tensors = {"encoder.LayerNorm.beta": 1, "encoder.dense.bias": 2}
    assert lookup_tensor(tensors, "encoder.LayerNorm.bias") == 1
    assert lookup_tensor(tensors, "encoder.dense.weight") is None
    assert strip_prefix({"x.a": 1, "b": 2}, "x.") == {"a": 1, "b": 2}
    assert strip_prefix({"x.a": 1}, "") == {"x.a": 1}


def test_resolve_sublayer_names_the_entry():
    model = _dense_and_norms()
    assert resolve_sublayer(model.layers[1], "kernel.path", "entry") == "dense/kernel"
    with pytest.raises(AttributeError, match=r"Converter entry my entry: .*no attribute 'query_dense'"):
        resolve_sublayer(model, "query_dense.kernel", "my entry")


def test_activations():
    assert kbert_activation("gelu_pytorch_tanh") == "gelu_approximate"
    assert kbert_activation("relu") == "relu"
    with pytest.raises(ValueError, match=r"Unsupported hidden activation 'leaky_relu'"):
        kbert_activation("leaky_relu")


def test_read_tensors_reads_safetensors(tmp_path):
    arrays = {"a": np.arange(6, dtype="float32").reshape(2, 3)}
    safetensors_numpy.save_file(arrays, tmp_path / "model.safetensors")
    np.testing.assert_array_equal(read_tensors(tmp_path)["a"], arrays["a"])


def test_read_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        read_config(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="No config.json"):
        read_config(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    assert read_config(str(tmp_path)) == {"model_type": "bert"}
