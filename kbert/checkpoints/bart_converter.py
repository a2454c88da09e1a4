"""Hugging Face BART checkpoints (`model_type: bart`) into a kbert `BART` backbone.

Reads `BartForConditionalGeneration` (tensors under `model.`, plus
`final_logits_bias`) and bare `BartModel` checkpoints (no head: the LM
head's bias is left at zero, as transformers initialises it). Hugging Face
`Linear` weights `[out, in]` are transposed; `final_logits_bias` `(1, V)`
becomes the `(V,)` bias of kbert's `lm_head`. The token table is
`model.shared`; `embed_tokens` and `lm_head.weight` are copies of it.

Only BART's own layout is read: post-LN (`normalize_before` false, as in
bart-base/large), no final stack LayerNorm (`add_final_layer_norm`, mBART's)
and the same head count and feed-forward width in both stacks.
"""

import numpy as np

from kbert.checkpoints.converter import Converter
from kbert.checkpoints.registry import register_converter
from kbert.checkpoints.weight_mapping import kbert_activation, resolve_sublayer
from kbert.models.bart import BART

_PROJECTIONS = {
    "query_dense": "q_proj", "key_dense": "k_proj", "value_dense": "v_proj", "output_dense": "out_proj"
}
_FINAL_LOGITS_BIAS = "final_logits_bias"


def _attention_names(attention, module):
    return {f"{attention}.{p}": f"{module}.{name}" for p, name in _PROJECTIONS.items()}


# `{attribute path in a block: HF module}` relative to `<stack>.layers.<i>.`.
ENCODER_BLOCK = {
    **_attention_names("attention_layer", "self_attn"),
    "attention_layer_norm": "self_attn_layer_norm",
    "intermediate_dense": "fc1",
    "output_dense": "fc2",
    "output_layer_norm": "final_layer_norm",
}
DECODER_BLOCK = {
    **_attention_names("self_attention", "self_attn"),
    "self_attention_layer_norm": "self_attn_layer_norm",
    **_attention_names("cross_attention", "encoder_attn"),
    "cross_attention_layer_norm": "encoder_attn_layer_norm",
    "intermediate_dense": "fc1",
    "output_dense": "fc2",
    "ffn_layer_norm": "final_layer_norm",
}


# The HF module of each sublayer of the backbone itself.
BART_BACKBONE = {
    "token_embedding": "shared",
    "encoder_position_embedding": "encoder.embed_positions",
    "decoder_position_embedding": "decoder.embed_positions",
    "encoder_embedding_layer_norm": "encoder.layernorm_embedding",
    "decoder_embedding_layer_norm": "decoder.layernorm_embedding",
}


def _same(config, encoder_key, decoder_key):
    if config[encoder_key] != config[decoder_key]:
        raise ValueError(
            f"kbert's BART has one value for {encoder_key} and {decoder_key}; the config has "
            f"{config[encoder_key]} and {config[decoder_key]}."
        )
    return config[encoder_key]


class BartConverter(Converter):
    """BART: the config mapping and the HF name of each `BART` sublayer.

    Example:
    >>> arguments = BartConverter().config_to_arguments({"vocab_size": 32, "d_model": 8,
    ...     "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
    ...     "decoder_attention_heads": 2, "encoder_ffn_dim": 16, "decoder_ffn_dim": 16,
    ...     "max_position_embeddings": 64})
    >>> arguments["max_positions"], arguments["activation"]
    (64, 'gelu')
    """

    model_types = ("bart",)
    task_prefix = "model."
    backbone_class = BART

    def config_to_arguments(self, config):
        for option in ("normalize_before", "add_final_layer_norm"):
            if config.get(option):
                raise ValueError(f"BART checkpoints with {option}=true (mBART's layout) are not supported.")
        if config.get("is_encoder_decoder") is False:
            raise ValueError("Only encoder-decoder BART checkpoints load.")
        ids = {key: config.get(key, default) for key, default in
               (("pad_token_id", 1), ("eos_token_id", 2), ("decoder_start_token_id", 2))}
        if ids != {"pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2}:
            raise ValueError(f"kbert's BART uses pad 1, end 2 and decoder start 2; the config has {ids}.")
        return dict(
            vocabulary_size=config["vocab_size"],
            num_layers=config["encoder_layers"],
            num_decoder_layers=config["decoder_layers"],
            num_heads=_same(config, "encoder_attention_heads", "decoder_attention_heads"),
            hidden_dim=config["d_model"],
            intermediate_dim=_same(config, "encoder_ffn_dim", "decoder_ffn_dim"),
            max_positions=config["max_position_embeddings"],
            activation=kbert_activation(config.get("activation_function", "gelu"), "activation_function"),
            dropout=config.get("dropout", 0.1),
            scale_embedding=bool(config.get("scale_embedding", False)),
            initializer_range=config.get("init_std", 0.02),
        )

    def read_backbone(self, config, directory, overrides):
        backbone, tensors, backbone_tensors = super().read_backbone(config, directory, overrides)
        bias = tensors.get(_FINAL_LOGITS_BIAS)
        tensors[_FINAL_LOGITS_BIAS] = (
            np.zeros((backbone.vocabulary_size,), "float32") if bias is None else np.reshape(bias, (-1,))
        )
        return backbone, tensors, backbone_tensors

    def ignored_tensors(self, backbone):
        # Copies of `shared.weight` (transformers writes them only untied).
        return ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")

    def sublayer_modules(self, backbone, tensors):
        pairs = [
            (resolve_sublayer(backbone, attribute, f"{self!r} {attribute!r}"), module)
            for attribute, module in BART_BACKBONE.items()
        ]
        for stack, attribute, names in (("encoder", "encoder_layers", ENCODER_BLOCK),
                                        ("decoder", "decoder_layers", DECODER_BLOCK)):
            blocks = resolve_sublayer(backbone, attribute, f"{self!r} {stack} blocks")
            pairs += self.block_modules(blocks, names, f"{stack}.layers.{{i}}.", f"{stack} block")
        return pairs

    def weight_names(self, backbone, tensors):
        names = super().weight_names(backbone, tensors)
        head = resolve_sublayer(backbone, "lm_head", f"{self!r} 'lm_head'")
        names[head.bias.path] = (_FINAL_LOGITS_BIAS, False)
        return names


register_converter(BartConverter())
