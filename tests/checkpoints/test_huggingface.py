"""kbert.checkpoints.huggingface: `from_huggingface` finds the directory, the
config and the converter of its `model_type`, and returns that family's backbone."""

import json
import warnings

import keras
import numpy as np
import pytest
from bert_family_checkpoints import SIZES, inputs, tiny_model, torch, transformers, write_config

import kbert
from kbert.checkpoints.huggingface import from_huggingface


def test_the_facade_and_the_package_are_the_same_function(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    assert kbert.checkpoints.from_huggingface is from_huggingface
    backbone = kbert.from_huggingface(tmp_path)
    assert isinstance(backbone, kbert.models.Encoder)


def test_overrides_apply(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    backbone = kbert.from_huggingface(tmp_path, dropout=0.0, use_pooler=False)
    assert backbone.dropout == 0.0 and backbone.pooler is None


@pytest.mark.parametrize("dtype", ["bfloat16", "mixed_bfloat16"])
def test_dtype_override(dtype, tmp_path):
    hf_model = tiny_model("bert")
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.from_huggingface(tmp_path, dtype=dtype)
    kernel = backbone.transformer_layers[0].attention_layer.query_dense.kernel
    assert kernel.dtype == ("bfloat16" if dtype == "bfloat16" else "float32")
    expected = hf_model.encoder.layer[0].attention.self.query.weight.detach().numpy().T
    actual = keras.ops.convert_to_numpy(keras.ops.cast(kernel, "float32"))
    np.testing.assert_allclose(actual, expected, rtol=1e-2, atol=1e-3)  # bfloat16 rounding
    outputs = backbone(inputs(0, with_segments=True))
    assert keras.backend.standardize_dtype(outputs["sequence_output"].dtype) == "bfloat16"


def test_unknown_family(tmp_path):
    write_config(tmp_path, model_type="reformer")
    with pytest.raises(ValueError, match=r"'reformer'.*'albert', 'bart'"):
        kbert.from_huggingface(tmp_path)


def test_missing_files(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        kbert.from_huggingface(missing)
    with pytest.raises(FileNotFoundError, match="config.json"):
        kbert.from_huggingface(tmp_path)
    write_config(tmp_path, model_type="bert", **SIZES)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        kbert.from_huggingface(tmp_path)


# --- A checkpoint whose config.json and tensors disagree, or that cannot be read ------


def _edit_config(directory, **changes):
    config_file = directory / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **changes}))


def test_tensors_no_layer_reads_are_named_with_the_directory(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    _edit_config(tmp_path, num_hidden_layers=1)  # the weights hold 2
    with pytest.raises(ValueError, match=r"pytest.*holds \d+ tensor\(s\) that no variable .* encoder\.layer\.1\."):
        kbert.from_huggingface(tmp_path)


def test_tensors_the_config_declares_but_the_file_lacks_are_named(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    _edit_config(tmp_path, num_hidden_layers=3)
    with pytest.raises(ValueError, match=rf"{tmp_path.name} lacks .*encoder\.layer\.2\."):
        kbert.from_huggingface(tmp_path)


def test_shapes_that_disagree_with_the_config_are_named(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    _edit_config(tmp_path, intermediate_size=40)
    with pytest.raises(ValueError, match=rf"intermediate\.dense\.weight' in .*{tmp_path.name} of shape"):
        kbert.from_huggingface(tmp_path)


def test_t5_config_with_fewer_layers_than_the_tensors_is_refused(tmp_path):
    config = transformers.T5Config(
        vocab_size=40, d_model=8, d_kv=4, d_ff=16, num_layers=2, num_heads=2, decoder_start_token_id=0
    )
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path)
    kbert.from_huggingface(tmp_path)  # tied copies of `shared` are no leftovers
    _edit_config(tmp_path, num_decoder_layers=1)
    with pytest.raises(ValueError, match=r"no variable of the T5 reads: decoder\.block\.1\."):
        kbert.from_huggingface(tmp_path)


def test_a_checkpoint_without_pooler_loads_with_a_warning_naming_it(tmp_path):
    transformers.BertModel(transformers.BertConfig(**SIZES), add_pooling_layer=False).save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match=rf"{tmp_path.name} has no pooler \(pooler\.dense\.weight\)"):
        backbone = kbert.from_huggingface(tmp_path)
    assert backbone.pooler is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kbert.from_huggingface(tmp_path, use_pooler=False).pooler is None
    with pytest.raises(ValueError, match="lacks 2 tensor.*pooler.dense.weight"):
        kbert.from_huggingface(tmp_path, use_pooler=True)


@pytest.mark.parametrize("filename", ["config.json", "model.safetensors", "pytorch_model.bin"])
def test_a_truncated_file_is_named(tmp_path, filename):
    model = tiny_model("bert")
    model.save_pretrained(tmp_path)
    if filename == "pytorch_model.bin":
        (tmp_path / "model.safetensors").unlink()
        torch.save(model.state_dict(), tmp_path / filename)
    file = tmp_path / filename
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"Cannot read .*{filename}: it is truncated or corrupt"):
        kbert.from_huggingface(tmp_path)


def test_unknown_overrides_are_named(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    with pytest.raises(TypeError, match="Unknown argument.*drop_out"):
        kbert.from_huggingface(tmp_path, drop_out=0.0)
