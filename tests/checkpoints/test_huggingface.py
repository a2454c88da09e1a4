"""kbert.checkpoints.huggingface: `from_huggingface` finds the directory, the
config and the converter of its `model_type`, and returns that family's backbone."""

import keras
import numpy as np
import pytest
from bert_family_checkpoints import SIZES, inputs, tiny_model, write_config

import kbert
from kbert.checkpoints.huggingface import from_huggingface


def test_the_facade_and_the_package_are_the_same_function(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    assert kbert.checkpoints.from_huggingface is from_huggingface
    backbone = kbert.models.from_huggingface(tmp_path)
    assert isinstance(backbone, kbert.models.Encoder)


def test_overrides_apply(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path, dropout=0.0, use_pooler=False)
    assert backbone.dropout == 0.0 and backbone.pooler is None


@pytest.mark.parametrize("dtype", ["bfloat16", "mixed_bfloat16"])
def test_dtype_override(dtype, tmp_path):
    hf_model = tiny_model("bert")
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.models.from_huggingface(tmp_path, dtype=dtype)
    kernel = backbone.transformer_layers[0].attention_layer.query_dense.kernel
    assert kernel.dtype == ("bfloat16" if dtype == "bfloat16" else "float32")
    expected = hf_model.encoder.layer[0].attention.self.query.weight.detach().numpy().T
    actual = keras.ops.convert_to_numpy(keras.ops.cast(kernel, "float32"))
    np.testing.assert_allclose(actual, expected, rtol=1e-2, atol=1e-3)  # bfloat16 rounding
    outputs = backbone(inputs(0, with_segments=True))
    assert keras.backend.standardize_dtype(outputs["sequence_output"].dtype) == "bfloat16"


def test_unknown_family(tmp_path):
    write_config(tmp_path, model_type="gpt2")
    with pytest.raises(ValueError, match=r"'gpt2'.*'albert', 'bert'"):
        kbert.models.from_huggingface(tmp_path)


def test_missing_files(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        kbert.models.from_huggingface(missing)
    with pytest.raises(FileNotFoundError, match="config.json"):
        kbert.models.from_huggingface(tmp_path)
    write_config(tmp_path, model_type="bert", **SIZES)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        kbert.models.from_huggingface(tmp_path)

