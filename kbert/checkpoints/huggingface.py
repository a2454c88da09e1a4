"""Import of Hugging Face checkpoints into a kbert `Encoder`.

`from_huggingface(path)` reads a local directory in the Hugging Face layout —
`config.json` plus the weights as `model.safetensors`, sharded safetensors
(`model.safetensors.index.json` and its shards) or `pytorch_model.bin`
(optionally sharded likewise) — builds the matching `kbert.models.Encoder` and
loads every one of its weights. Nothing is downloaded: fetch the directory
first (e.g. `huggingface_hub.snapshot_download`) and pass its path.

Supported `model_type`s:

- `bert`; `roberta`, `xlm-roberta`, `camembert` (the same architecture:
  positions numbered from `pad_token_id + 1`, see ALGORITHMS.md §2);
- `albert` (factorized embedding and one shared block: `num_hidden_groups`
  and `inner_group_num` must be 1, and `embedding_size` must differ from
  `hidden_size`, because kbert has no E→H projection when they are equal);
- `electra` (the discriminator or generator backbone, with
  `embeddings_project` when `embedding_size != hidden_size`; no pooler);
- `distilbert` (no segment embedding, no pooler; a sinusoidal position table
  is fine as long as it is stored in the checkpoint, which it is for
  checkpoints that `transformers` writes);
- `big_bird` and `longformer` (sparse attention): see
  `kbert.checkpoints.huggingface_long`;
- `t5` (v1.0 and v1.1), which builds a `kbert.models.T5`: see
  `kbert.checkpoints.huggingface_t5`.

Only absolute position embeddings and bidirectional encoders are supported
(`position_embedding_type="absolute"`, `is_decoder=False`). Task checkpoints
(`BertForMaskedLM`, `RobertaForSequenceClassification`, `ElectraForPreTraining`
…) load too: the task prefix (`bert.`, `roberta.` …) is stripped and head
tensors are ignored. The pooler is built when the checkpoint has one (masked-LM
checkpoints usually do not); pass `use_pooler=...` to decide yourself. Old
LayerNorm names (`gamma`/`beta`) are accepted. PyTorch is needed only for
`pytorch_model.bin` files; safetensors files are read with NumPy. The model is
built under the current Keras dtype policy (float32 by default), whatever dtype
the checkpoint stores (float16 and bfloat16 tensors are widened); pass
`dtype=...` to choose another.

Hugging Face `Linear` weights are `[out, in]` and are transposed to Keras
`[in, out]` kernels. Every kbert variable must be filled: a tensor that is
missing, or whose shape differs, raises a `ValueError` naming it.
"""

import json
import os

import numpy as np

from kbert.checkpoints import huggingface_long
from kbert.models.encoder import Encoder

# --- Configuration ---------------------------------------------------------

# Hugging Face `hidden_act` names -> kbert activation names (HF "gelu" is the
# exact erf form; the tanh forms are "gelu_approximate").
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
    "tanh": "tanh",
}

_MODEL_TYPES = {
    "bert": "bert",
    "roberta": "roberta",
    "xlm-roberta": "roberta",
    "camembert": "roberta",
    "albert": "albert",
    "electra": "electra",
    "distilbert": "distilbert",
}


def _activation(name):
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"Unsupported hidden activation {name!r} in config.json; "
            f"supported: {sorted(_ACTIVATIONS)}."
        )
    return _ACTIVATIONS[name]


def _check_bert_like(config):
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(
            f"position_embedding_type={position_type!r} is not supported; "
            "kbert imports absolute position embeddings only."
        )
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise ValueError(
            "Decoder configurations (is_decoder / add_cross_attention) are not "
            "supported; kbert imports bidirectional encoders only."
        )


def _bert_like_arguments(config):
    """`Encoder` arguments for the BERT-style config keys."""
    _check_bert_like(config)
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_positions=config.get("max_position_embeddings", 512),
        num_segments=config.get("type_vocab_size", 2),
        activation=_activation(config.get("hidden_act", "gelu")),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        initializer_range=config.get("initializer_range", 0.02),
    )


def _roberta_arguments(config):
    # Positions are cumsum(id != pad) + pad_token_id (ALGORITHMS.md §2).
    return dict(
        _bert_like_arguments(config), position_offset=config.get("pad_token_id", 1) + 1
    )


def _albert_arguments(config):
    for key in ("num_hidden_groups", "inner_group_num"):
        if config.get(key, 1) != 1:
            raise ValueError(
                f"ALBERT {key}={config[key]} is not supported; kbert shares one "
                "block across all layers (num_hidden_groups=1, inner_group_num=1)."
            )
    embedding_dim = config.get("embedding_size", 128)
    if embedding_dim == config["hidden_size"]:
        raise ValueError(
            f"ALBERT with embedding_size == hidden_size ({embedding_dim}) is not "
            "supported: the checkpoint has an embedding_hidden_mapping_in "
            "projection that a kbert Encoder only builds when the sizes differ."
        )
    return dict(_bert_like_arguments(config), embedding_dim=embedding_dim, share_layers=True)


def _electra_arguments(config):
    return dict(
        _bert_like_arguments(config),
        embedding_dim=config.get("embedding_size", config["hidden_size"]),
        use_pooler=False,
    )


def _distilbert_arguments(config):
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["n_layers"],
        num_heads=config["n_heads"],
        hidden_dim=config["dim"],
        intermediate_dim=config["hidden_dim"],
        max_positions=config.get("max_position_embeddings", 512),
        num_segments=0,
        activation=_activation(config.get("activation", "gelu")),
        layer_norm_epsilon=1e-12,  # fixed in HF:distilbert
        dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("attention_dropout", 0.1),
        initializer_range=config.get("initializer_range", 0.02),
        use_pooler=False,
    )


# --- Weight names ----------------------------------------------------------

# Per family: the task-model prefix, the config mapping, and the HF name of
# each kbert sublayer. Block names are relative to `block`, where `{i}` is the
# layer index (ALBERT's one shared block has a fixed name).
_BERT_BLOCK = {
    "attention_layer.query_dense": "attention.self.query",
    "attention_layer.key_dense": "attention.self.key",
    "attention_layer.value_dense": "attention.self.value",
    "attention_layer.output_dense": "attention.output.dense",
    "attention_layer_norm": "attention.output.LayerNorm",
    "intermediate_dense": "intermediate.dense",
    "output_dense": "output.dense",
    "output_layer_norm": "output.LayerNorm",
}
_BERT_EMBEDDINGS = {
    "token_embedding": "embeddings.word_embeddings",
    "position_embedding": "embeddings.position_embeddings",
    "segment_embedding": "embeddings.token_type_embeddings",
    "layer_norm": "embeddings.LayerNorm",
}

_FAMILIES = {
    "bert": dict(
        prefix="bert.",
        arguments=_bert_like_arguments,
        embeddings=_BERT_EMBEDDINGS,
        block="encoder.layer.{i}.",
        block_names=_BERT_BLOCK,
        pooler="pooler.dense",
    ),
    "roberta": dict(
        prefix="roberta.",
        arguments=_roberta_arguments,
        embeddings=_BERT_EMBEDDINGS,
        block="encoder.layer.{i}.",
        block_names=_BERT_BLOCK,
        pooler="pooler.dense",
    ),
    "albert": dict(
        prefix="albert.",
        arguments=_albert_arguments,
        embeddings={**_BERT_EMBEDDINGS, "projection": "encoder.embedding_hidden_mapping_in"},
        block="encoder.albert_layer_groups.0.albert_layers.0.",
        block_names={
            "attention_layer.query_dense": "attention.query",
            "attention_layer.key_dense": "attention.key",
            "attention_layer.value_dense": "attention.value",
            "attention_layer.output_dense": "attention.dense",
            "attention_layer_norm": "attention.LayerNorm",
            "intermediate_dense": "ffn",
            "output_dense": "ffn_output",
            "output_layer_norm": "full_layer_layer_norm",
        },
        pooler="pooler",
    ),
    "electra": dict(
        prefix="electra.",
        arguments=_electra_arguments,
        embeddings={**_BERT_EMBEDDINGS, "projection": "embeddings_project"},
        block="encoder.layer.{i}.",
        block_names=_BERT_BLOCK,
        pooler=None,
    ),
    "distilbert": dict(
        prefix="distilbert.",
        arguments=_distilbert_arguments,
        embeddings={
            "token_embedding": "embeddings.word_embeddings",
            "position_embedding": "embeddings.position_embeddings",
            "layer_norm": "embeddings.LayerNorm",
        },
        block="transformer.layer.{i}.",
        block_names={
            "attention_layer.query_dense": "attention.q_lin",
            "attention_layer.key_dense": "attention.k_lin",
            "attention_layer.value_dense": "attention.v_lin",
            "attention_layer.output_dense": "attention.out_lin",
            "attention_layer_norm": "sa_layer_norm",
            "intermediate_dense": "ffn.lin1",
            "output_dense": "ffn.lin2",
            "output_layer_norm": "output_layer_norm",
        },
        pooler=None,
    ),
}


# The long-document families (BigBird, Longformer) live in their own module.
_MODEL_TYPES.update(huggingface_long.MODEL_TYPES)
_FAMILIES.update(huggingface_long.FAMILIES)


# --- Reading the checkpoint ------------------------------------------------


def _read_safetensors(file):
    import ml_dtypes  # noqa: F401  (a Keras dependency; lets NumPy read bfloat16)
    from safetensors.numpy import load_file

    return load_file(file)


def _read_torch(file):
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"Reading {file} needs PyTorch (`pip install torch`); or convert the "
            "checkpoint to model.safetensors, which kbert reads without it."
        ) from None
    state = torch.load(file, map_location="cpu", weights_only=True)
    return {
        name: (t.float() if t.dtype == torch.bfloat16 else t).detach().numpy()
        for name, t in state.items()
    }


def _read_tensors(directory):
    """All tensors of the checkpoint in `directory`, as NumPy arrays by name."""
    candidates = [
        ("model.safetensors", _read_safetensors),
        ("model.safetensors.index.json", _read_safetensors),
        ("pytorch_model.bin", _read_torch),
        ("pytorch_model.bin.index.json", _read_torch),
    ]
    for filename, read in candidates:
        file = os.path.join(directory, filename)
        if not os.path.isfile(file):
            continue
        if not filename.endswith(".index.json"):
            return read(file)
        with open(file) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for shard in shards:
            tensors.update(read(os.path.join(directory, shard)))
        return tensors
    raise FileNotFoundError(
        f"No weights found in {directory}: expected one of "
        f"{', '.join(name for name, _ in candidates)}."
    )


# --- Loading ---------------------------------------------------------------


def _attribute(obj, dotted):
    for name in dotted.split("."):
        obj = getattr(obj, name)
    return obj


def _assignments(model, family):
    """`(variable, hf_name, transpose)` for every variable of `model`."""
    pairs = []  # (kbert layer, HF module name)
    for attribute, hf_name in family["embeddings"].items():
        layer = getattr(model.embeddings, attribute)
        if layer is not None:
            pairs.append((layer, hf_name))
    seen = set()
    for index, block in enumerate(model.transformer_layers):
        if id(block) in seen:  # shared layers (ALBERT) are loaded once
            continue
        seen.add(id(block))
        prefix = family["block"].format(i=index)
        for attribute, hf_name in family["block_names"].items():
            pairs.append((_attribute(block, attribute), prefix + hf_name))
    if model.pooler is not None:
        if family["pooler"] is None:
            raise ValueError(
                "This checkpoint family has no pooler weights; build the model "
                "with use_pooler=False (the default for it)."
            )
        pairs.append((model.pooler.dense, family["pooler"]))

    assignments = []
    for layer, hf_name in pairs:
        if hasattr(layer, "kernel"):  # Dense: HF Linear weight is [out, in]
            assignments.append((layer.kernel, hf_name + ".weight", True))
            assignments.append((layer.bias, hf_name + ".bias", False))
        elif hasattr(layer, "gamma"):  # LayerNormalization
            assignments.append((layer.gamma, hf_name + ".weight", False))
            assignments.append((layer.beta, hf_name + ".bias", False))
        else:  # Embedding, PositionEmbedding
            assignments.append((layer.embeddings, hf_name + ".weight", False))
    return assignments


def _lookup(tensors, name):
    """The tensor for `name`, accepting old LayerNorm `gamma`/`beta` names."""
    if name in tensors:
        return tensors[name]
    old = {"weight": "gamma", "bias": "beta"}
    stem, _, leaf = name.rpartition(".")
    if "LayerNorm" in stem or "layer_norm" in stem:
        return tensors.get(f"{stem}.{old[leaf]}")
    return None


def _load_weights(model, family, tensors, config, directory):
    assignments = _assignments(model, family)
    covered = {v.path for v, _, _ in assignments}
    uncovered = [v.path for v in model.weights if v.path not in covered]
    if uncovered:
        raise RuntimeError(f"kbert variables without a Hugging Face name: {uncovered}.")

    arrays, missing = [], []
    for variable, name, transpose in assignments:
        array = _lookup(tensors, name)
        expected = tuple(variable.shape)
        if array is None:
            missing.append(f"{name} (shape {expected[::-1] if transpose else expected})")
            continue
        array = np.asarray(array.T if transpose else array)
        if tuple(array.shape) != expected:
            hf_shape = tuple(array.shape[::-1] if transpose else array.shape)
            raise ValueError(
                f"Shape mismatch for Hugging Face tensor {name!r} of shape {hf_shape}"
                + (f" (transposed to {tuple(array.shape)})" if transpose else "")
                + f": the kbert variable {variable.path!r} has shape {expected}."
            )
        arrays.append((variable, array))
    if missing:
        hint = ""
        if config.get("sinusoidal_pos_embds"):
            hint = (
                " (sinusoidal_pos_embds=True: the position table must be stored "
                "in the checkpoint)"
            )
        raise ValueError(
            f"The checkpoint in {directory} lacks {len(missing)} tensor(s) the "
            f"model needs{hint}: {', '.join(missing[:5])}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            + f". It holds e.g. {sorted(tensors)[:5]}."
        )
    for variable, array in arrays:
        if array.dtype != np.float32:
            array = array.astype(np.float32)
        variable.assign(array)


def from_huggingface(path, **overrides):
    """Build an `Encoder` from a local Hugging Face checkpoint directory.

    Args:
        path: directory with `config.json` and `model.safetensors` (or sharded
            safetensors, or `pytorch_model.bin`).
        **overrides: `Encoder` arguments that replace those read from the
            config, e.g. `dtype="mixed_bfloat16"`, `dropout=0.0`, or
            `use_pooler=False`.

    Returns:
        A `kbert.models.Encoder` with every weight loaded.

    Raises:
        FileNotFoundError: `path` is not a directory, or lacks the config or weights.
        ValueError: an unsupported `model_type` or config option, or a missing
            or mis-shaped tensor.

    Example:
    ```python
    # Saved beforehand with transformers: BertModel(...).save_pretrained(path)
    backbone = kbert.models.from_huggingface(path)
    outputs = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
    outputs["sequence_output"]  # == BertModel's last_hidden_state
    ```
    """
    directory = os.fspath(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Hugging Face checkpoint directory not found: {directory}")
    config_file = os.path.join(directory, "config.json")
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"No config.json in {directory}.")
    with open(config_file) as f:
        config = json.load(f)

    model_type = config.get("model_type")
    if model_type == "t5":
        from kbert.checkpoints.huggingface_t5 import t5_from_huggingface

        return t5_from_huggingface(config, _read_tensors(directory), **overrides)
    if model_type not in _MODEL_TYPES:
        raise ValueError(
            f"Unsupported model_type {model_type!r} in {config_file}; supported: "
            f"{sorted([*_MODEL_TYPES, 't5'])}."
        )
    family = _FAMILIES[_MODEL_TYPES[model_type]]
    arguments = family["arguments"](config)

    tensors = _read_tensors(directory)
    prefix = family["prefix"]
    tensors = {
        name[len(prefix) :] if name.startswith(prefix) else name: array
        for name, array in tensors.items()
    }
    if family["pooler"] is not None:
        arguments["use_pooler"] = family["pooler"] + ".weight" in tensors
    arguments.update(overrides)

    model = Encoder(**arguments)
    _load_weights(model, family, tensors, config, directory)
    return model
