"""Hugging Face T5 checkpoints (`model_type: t5`) into a kbert `T5` backbone.

Reads v1.0 (`feed_forward_proj: relu`, output tied to `shared` and rescaled by
`d^-0.5`) and v1.1 (`gated-gelu`, no rescale, `lm_head`) checkpoints of
`T5ForConditionalGeneration`. Weight names are those of docs/algorithms.md §8;
Hugging Face `Linear` weights `[out, in]` are transposed.

Whether the decoder output is rescaled is read from `scale_decoder_outputs`
(configs written by transformers 5) or `tie_word_embeddings` (older configs).
kbert ties the output projection exactly when it rescales (v1.0); for a v1.1
checkpoint the kbert `lm_head` is filled from `lm_head.weight`, or from
`shared.weight` when the checkpoint stores no separate head (transformers 5
always ties the two), so the logits are the same either way.
"""

import numpy as np

from kbert.checkpoints.converter import Converter
from kbert.checkpoints.registry import register_converter
from kbert.checkpoints.weight_mapping import (
    SUPPORTED_ACTIVATIONS,
    kbert_activation,
    resolve_sublayer,
)
from kbert.models.t5 import T5

_PROJECTIONS = {"query_dense": "q", "key_dense": "k", "value_dense": "v", "output_dense": "o"}
_RELATIVE_BIAS = "{}.block.0.layer.0.SelfAttention.relative_attention_bias"

# The HF module of each sublayer of the backbone itself (the blocks' are below).
T5_BACKBONE = {
    "token_embedding": "shared",
    "encoder_position_bias": _RELATIVE_BIAS.format("encoder"),
    "decoder_position_bias": _RELATIVE_BIAS.format("decoder"),
    "encoder_final_layer_norm": "encoder.final_layer_norm",
    "decoder_final_layer_norm": "decoder.final_layer_norm",
}


def t5_block_names(decoder, gated):
    """`{attribute path in a T5 block: HF module}` relative to `<stack>.block.<i>.`.

    >>> t5_block_names(decoder=True, gated=True)["cross_attention.query_dense"]
    'layer.1.EncDecAttention.q'
    """
    names = {"self_attention_layer_norm": "layer.0.layer_norm"}
    for projection, module in _PROJECTIONS.items():
        names[f"self_attention.{projection}"] = f"layer.0.SelfAttention.{module}"
    if decoder:
        names["cross_attention_layer_norm"] = "layer.1.layer_norm"
        for projection, module in _PROJECTIONS.items():
            names[f"cross_attention.{projection}"] = f"layer.1.EncDecAttention.{module}"
    ffn = f"layer.{2 if decoder else 1}."
    names["ffn_layer_norm"] = ffn + "layer_norm"
    if gated:
        names["intermediate_dense"] = ffn + "DenseReluDense.wi_0"
        names["gate_dense"] = ffn + "DenseReluDense.wi_1"
    else:
        names["intermediate_dense"] = ffn + "DenseReluDense.wi"
    names["output_dense"] = ffn + "DenseReluDense.wo"
    return names


class T5Converter(Converter):
    """T5 v1.0 and v1.1: the config mapping and the HF name of each `T5` sublayer.

    Example:
    >>> converter = T5Converter()
    >>> converter.config_to_arguments({"vocab_size": 32, "num_layers": 1, "num_heads": 2,
    ...     "d_model": 8, "d_ff": 16, "d_kv": 4, "feed_forward_proj": "gated-gelu",
    ...     "tie_word_embeddings": False})["activation"]
    'gelu_approximate'
    """

    model_types = ("t5",)
    backbone_class = T5

    def config_to_arguments(self, config):
        projection = config.get("feed_forward_proj", "relu")
        gated = projection.startswith("gated-")
        activation = projection.split("-")[-1]
        if projection == "gated-gelu":  # the reference maps this name to tanh GELU
            activation = "gelu_new"
        if activation not in SUPPORTED_ACTIVATIONS:
            raise ValueError(
                f"Unsupported T5 feed_forward_proj {projection!r}; supported activations: "
                f"{sorted(SUPPORTED_ACTIVATIONS)} (optionally 'gated-')."
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
            activation=kbert_activation(activation),
            use_gated_activation=gated,
            tie_embeddings=bool(scale),
            dropout=config.get("dropout_rate", 0.1),
            layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
            num_buckets=config.get("relative_attention_num_buckets", 32),
            max_distance=config.get("relative_attention_max_distance", 128),
            initializer_factor=config.get("initializer_factor", 1.0),
        )

    def arguments_from_tensors(self, arguments, tensors):
        if "lm_head.weight" in tensors and arguments["tie_embeddings"]:
            if not np.array_equal(tensors["lm_head.weight"], tensors.get("shared.weight")):
                raise ValueError(
                    "This checkpoint rescales the decoder output (v1.0 style) but has an "
                    "lm_head different from the shared embeddings; kbert ties the two in "
                    "that case."
                )
        return arguments

    def ignored_tensors(self, backbone):
        # Copies of `shared.weight` (tied, or checked equal above).
        copies = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
        return copies + (("lm_head.weight",) if backbone.lm_head is None else ())

    def sublayer_modules(self, backbone, tensors):
        pairs = [
            (resolve_sublayer(backbone, path, f"{self!r} {path!r}: {module!r}"), module)
            for path, module in T5_BACKBONE.items()
        ]
        if resolve_sublayer(backbone, "lm_head", f"{self!r} 'lm_head'") is not None:
            pairs.append((backbone.lm_head, "lm_head" if "lm_head.weight" in tensors else "shared"))
        for stack, attribute in (("encoder", "encoder_layers"), ("decoder", "decoder_layers")):
            names = t5_block_names(stack == "decoder", backbone.use_gated_activation)
            blocks = resolve_sublayer(backbone, attribute, f"{self!r} {stack} blocks")
            pairs += self.block_modules(blocks, names, f"{stack}.block.{{i}}.", f"{stack} block")
        return pairs


register_converter(T5Converter())
