"""Hugging Face XLNet checkpoints (`model_type: xlnet`) into a kbert `XLNet` backbone.

Reads `XLNetModel`, `XLNetLMHeadModel` (backbone under `transformer.`; the
tied `lm_loss` is read by `kbert.from_huggingface_task` into an
`XLNetPretrainer`) and the task checkpoints. The attention's projections are
stored as `(hidden, heads, key_dim)` tensors (`q`, `k`, `v`, `o`, `r`), as
kbert's `TwoStreamRelativeAttention` keeps them: nothing is transposed.

transformers' `mem_len` is not carried over: the backbone keeps no memory
unless built with `memory_length=...` (pass it as an override).
"""

from kbert.checkpoints.converter import Converter
from kbert.checkpoints.registry import register_converter
from kbert.checkpoints.weight_mapping import check_fixed_options, kbert_activation
from kbert.models.xlnet import XLNet

# The attention's variables and the XLNet tensor each reads, relative to `layer.<i>.rel_attn.`.
ATTENTION_TENSORS = {
    "query_kernel": "q",
    "key_kernel": "k",
    "value_kernel": "v",
    "output_kernel": "o",
    "position_kernel": "r",
    "content_bias": "r_w_bias",
    "position_bias": "r_r_bias",
    "segment_bias": "r_s_bias",
    "segment_embedding": "seg_embed",
}
# A block's Dense and LayerNorm layers and their modules, relative to `layer.<i>.`.
BLOCK_MODULES = {
    "attention_layer.layer_norm": "rel_attn.layer_norm",
    "intermediate_dense": "ff.layer_1",
    "output_dense": "ff.layer_2",
    "output_layer_norm": "ff.layer_norm",
}

# Config options kbert's XLNet does not represent, with the value it needs.
_FIXED_OPTIONS = {"attn_type": "bi", "bi_data": False}


class XLNetConverter(Converter):
    """XLNet: the config mapping and the HF name of each `XLNet` variable.

    Example:
    >>> arguments = XLNetConverter().config_to_arguments({"vocab_size": 50, "d_model": 8,
    ...     "n_layer": 1, "n_head": 2, "d_inner": 16})
    >>> arguments["intermediate_dim"], arguments["activation"]
    (16, 'gelu')
    """

    model_types = ("xlnet",)
    task_prefix = "transformer."
    backbone_class = XLNet

    def config_to_arguments(self, config):
        check_fixed_options(config, _FIXED_OPTIONS, "XLNet")
        hidden, heads = config["d_model"], config["n_head"]
        if config.get("d_head", hidden // heads) * heads != hidden:
            raise ValueError(f"Unsupported XLNet d_head={config['d_head']}: kbert needs d_model / n_head.")
        return dict(
            vocabulary_size=config["vocab_size"],
            num_layers=config["n_layer"],
            num_heads=heads,
            hidden_dim=hidden,
            intermediate_dim=config["d_inner"],
            dropout=config.get("dropout", 0.1),
            activation=kbert_activation(config.get("ff_activation", "gelu"), "ff_activation"),
            layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
            clamp_length=config.get("clamp_len", -1),
        )

    def sublayer_modules(self, backbone, tensors):
        pairs = [(backbone.token_embedding, "word_embedding")]
        pairs += self.block_modules(backbone.transformer_layers, BLOCK_MODULES, "layer.{i}.")
        return pairs

    def weight_names(self, backbone, tensors):
        names = super().weight_names(backbone, tensors)
        names[backbone.query_embedding.embeddings.path] = ("mask_emb", False)
        for index, block in enumerate(backbone.transformer_layers):
            for attribute, tensor in ATTENTION_TENSORS.items():
                variable = getattr(block.attention_layer, attribute)
                names[variable.path] = (f"layer.{index}.rel_attn.{tensor}", False)
        return names


register_converter(XLNetConverter())
