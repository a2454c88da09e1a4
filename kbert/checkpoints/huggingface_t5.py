"""Import of Hugging Face T5 checkpoints (`model_type: t5`) into a kbert `T5`.

`kbert.models.from_huggingface(path)` forwards here for T5 directories: v1.0
(`feed_forward_proj: relu`, output tied to `shared` and rescaled by `d^-0.5`)
and v1.1 (`gated-gelu`, no rescale, `lm_head`). Weight names are those of
ALGORITHMS.md §3; Hugging Face `Linear` weights `[out, in]` are transposed.

Whether the decoder output is rescaled is read from `scale_decoder_outputs`
(configs written by transformers 5) or `tie_word_embeddings` (older configs).
kbert ties the output projection exactly when it rescales (v1.0); for a v1.1
checkpoint the kbert `lm_head` is filled from `lm_head.weight`, or from
`shared.weight` when the checkpoint stores no separate head (transformers 5
always ties the two), so the logits are the same either way.
"""

import numpy as np

from kbert.models.t5 import T5

_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_approximate", "silu": "silu"}

_ATTENTION = {"query_dense": "q", "key_dense": "k", "value_dense": "v", "output_dense": "o"}


def _arguments(config):
    projection = config.get("feed_forward_proj", "relu")
    gated = projection.startswith("gated-")
    activation = projection.split("-")[-1]
    if projection == "gated-gelu":  # the reference maps this name to tanh GELU
        activation = "gelu_new"
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"Unsupported T5 feed_forward_proj {projection!r}; supported activations: "
            f"{sorted(_ACTIVATIONS)} (optionally 'gated-')."
        )
    if config.get("is_decoder") or config.get("is_encoder_decoder") is False:
        raise ValueError("Only encoder-decoder T5 checkpoints (T5ForConditionalGeneration) load.")
    scale = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True) is not False)
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_layers"],
        num_decoder_layers=config.get("num_decoder_layers") or config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["d_model"],
        intermediate_dim=config["d_ff"],
        key_dim=config["d_kv"],
        activation=_ACTIVATIONS[activation],
        use_gated_activation=gated,
        tie_embeddings=bool(scale),
        dropout=config.get("dropout_rate", 0.1),
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
        num_buckets=config.get("relative_attention_num_buckets", 32),
        max_distance=config.get("relative_attention_max_distance", 128),
        initializer_factor=config.get("initializer_factor", 1.0),
    )


def _block_names(block, prefix, decoder):
    """`(kbert layer, HF module name)` pairs of one block."""
    pairs = [(block.self_attention_layer_norm, f"{prefix}layer.0.layer_norm")]
    pairs += [
        (getattr(block.self_attention, name), f"{prefix}layer.0.SelfAttention.{hf}")
        for name, hf in _ATTENTION.items()
    ]
    ffn = f"{prefix}layer.{2 if decoder else 1}."
    if decoder:
        pairs.append((block.cross_attention_layer_norm, f"{prefix}layer.1.layer_norm"))
        pairs += [
            (getattr(block.cross_attention, name), f"{prefix}layer.1.EncDecAttention.{hf}")
            for name, hf in _ATTENTION.items()
        ]
    pairs.append((block.ffn_layer_norm, ffn + "layer_norm"))
    if block.use_gated_activation:
        pairs.append((block.intermediate_dense, ffn + "DenseReluDense.wi_0"))
        pairs.append((block.gate_dense, ffn + "DenseReluDense.wi_1"))
    else:
        pairs.append((block.intermediate_dense, ffn + "DenseReluDense.wi"))
    pairs.append((block.output_dense, ffn + "DenseReluDense.wo"))
    return pairs


def _assignments(model, tensors):
    """`(variable, array)` for every variable of `model`."""
    pairs = []
    for stack, layers in (("encoder", model.encoder_layers), ("decoder", model.decoder_layers)):
        for index, block in enumerate(layers):
            pairs += _block_names(block, f"{stack}.block.{index}.", stack == "decoder")
    names = {}
    for layer, hf_name in pairs:
        if hasattr(layer, "kernel"):
            names[layer.kernel.path] = (hf_name + ".weight", True)
        else:
            names[layer.scale.path] = (hf_name + ".weight", False)
    names[model.token_embedding.embeddings.path] = ("shared.weight", False)
    bias = "{}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    names[model.encoder_position_bias.embeddings.path] = (bias.format("encoder"), False)
    names[model.decoder_position_bias.embeddings.path] = (bias.format("decoder"), False)
    names[model.encoder_final_layer_norm.scale.path] = ("encoder.final_layer_norm.weight", False)
    names[model.decoder_final_layer_norm.scale.path] = ("decoder.final_layer_norm.weight", False)
    if model.lm_head is not None:
        head = "lm_head.weight" if "lm_head.weight" in tensors else "shared.weight"
        names[model.lm_head.kernel.path] = (head, True)

    assignments, missing = [], []
    for variable in model.weights:
        if variable.path not in names:
            raise RuntimeError(f"kbert variable without a Hugging Face name: {variable.path}.")
        name, transpose = names[variable.path]
        if name not in tensors:
            missing.append(name)
            continue
        array = np.asarray(tensors[name].T if transpose else tensors[name])
        if tuple(array.shape) != tuple(variable.shape):
            raise ValueError(
                f"Shape mismatch for Hugging Face tensor {name!r} of shape "
                f"{tuple(tensors[name].shape)}: the kbert variable {variable.path!r} "
                f"has shape {tuple(variable.shape)}" + (" (after transposing)." if transpose else ".")
            )
        assignments.append((variable, array))
    if missing:
        raise ValueError(
            f"The checkpoint lacks {len(missing)} T5 tensor(s): {', '.join(missing[:5])}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            + "."
        )
    return assignments


def t5_from_huggingface(config, tensors, **overrides):
    """Build a `T5` from a parsed `config.json` and its tensors by name, every weight loaded.

    Called by `kbert.checkpoints.huggingface.from_huggingface`; `overrides`
    replace `T5` arguments read from the config (e.g. `dropout=0.0`).
    """
    arguments = _arguments(config)
    if "lm_head.weight" in tensors and arguments["tie_embeddings"]:
        if not np.array_equal(tensors["lm_head.weight"], tensors.get("shared.weight")):
            raise ValueError(
                "This checkpoint rescales the decoder output (v1.0 style) but has an "
                "lm_head different from the shared embeddings; kbert ties the two in "
                "that case."
            )
    arguments.update(overrides)
    model = T5(**arguments)
    for variable, array in _assignments(model, tensors):
        variable.assign(array.astype(np.float32) if array.dtype != np.float32 else array)
    return model
