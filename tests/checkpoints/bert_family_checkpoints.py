"""Tiny random `transformers` models of the BERT-style families, and how to
compare a kbert backbone with them (shared by the checkpoint tests)."""

import json

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

# float32 on both sides; the differences are round-off only (measured <= 3e-7
# on TensorFlow, JAX and PyTorch), so 1e-4 leaves a wide margin.
TOLERANCE = 1e-4

SIZES = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
)

# family -> (config class, model class, config keywords, pad id)
FAMILIES = {
    "bert": ("BertConfig", "BertModel", SIZES, 0),
    "roberta": (
        "RobertaConfig",
        "RobertaModel",
        dict(SIZES, type_vocab_size=1, layer_norm_eps=1e-5),
        1,
    ),
    "albert": (
        "AlbertConfig",
        "AlbertModel",
        dict(SIZES, embedding_size=16, num_hidden_layers=3),
        0,
    ),
    "electra": ("ElectraConfig", "ElectraModel", dict(SIZES, embedding_size=16), 0),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertModel",
        dict(
            vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64
        ),
        0,
    ),
}


def randomize(model):
    """Random values for every parameter (LayerNorm scales and biases included),
    so a mix-up of any two tensors shows in the outputs."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    return model.eval()


def tiny_model(family, model_class=None, **config):
    config_name, model_name, keywords, _ = FAMILIES[family]
    config = getattr(transformers, config_name)(**{**keywords, **config})
    return randomize(getattr(transformers, model_class or model_name)(config))


def inputs(pad_id, with_segments):
    """Three sequences of length 11: full, and right-padded after 7 and 3 tokens."""
    rng = np.random.default_rng(0)
    token_ids = rng.integers(3, 99, size=(3, 11)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[1, 7:] = 0
    padding_mask[2, 3:] = 0
    token_ids[padding_mask == 0] = pad_id
    batch = {"token_ids": token_ids, "padding_mask": padding_mask}
    if with_segments:
        segment_ids = np.zeros_like(token_ids)
        segment_ids[:, 5:] = 1
        batch["segment_ids"] = segment_ids * padding_mask
    return batch


def compare(hf_model, backbone, pad_id=0):
    """Max abs differences (sequence, pooled or None) of the two models' outputs."""
    batch = inputs(pad_id, with_segments=backbone.num_segments > 1)
    if backbone.num_segments == 1:
        batch["segment_ids"] = np.zeros_like(batch["token_ids"])
    hf_inputs = {
        "input_ids": torch.tensor(batch["token_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(batch["padding_mask"], dtype=torch.long),
    }
    if "segment_ids" in batch:
        hf_inputs["token_type_ids"] = torch.tensor(batch["segment_ids"], dtype=torch.long)
    with torch.no_grad():
        expected = hf_model(**hf_inputs)
    outputs = backbone(batch, training=False)
    sequence = keras.ops.convert_to_numpy(outputs["sequence_output"])
    sequence_diff = float(np.abs(sequence - expected.last_hidden_state.numpy()).max())
    pooled_diff = None
    if getattr(expected, "pooler_output", None) is not None:
        pooled = keras.ops.convert_to_numpy(outputs["pooled_output"])
        pooled_diff = float(np.abs(pooled - expected.pooler_output.numpy()).max())
    return sequence_diff, pooled_diff


def rewrite_tensors(directory, edit):
    """Replace the tensors of `directory`'s model.safetensors by `edit(tensors)`."""
    file = directory / "model.safetensors"
    tensors = safetensors_numpy.load_file(file)
    safetensors_numpy.save_file(edit(tensors), file, metadata={"format": "pt"})


def write_config(directory, **config):
    (directory / "config.json").write_text(json.dumps(config))
