"""Hugging Face GPT-2 checkpoints (`model_type: gpt2`) into a kbert `GPT2` backbone.

Reads `GPT2Model` and `GPT2LMHeadModel` checkpoints (docs/algorithms.md §11).
GPT-2 stores its projections as `Conv1D` weights `[in, out]`, which are
Keras kernels as they are (no transpose), and fuses the query, key and value
projections in one `c_attn` `[H, 3H]`, which is split into three here. The LM
head is tied to `wte`: a checkpoint whose `lm_head` differs is refused.
"""

import numpy as np

from kbert.checkpoints.converter import Converter
from kbert.checkpoints.registry import register_converter
from kbert.checkpoints.weight_mapping import check_fixed_options, kbert_activation, resolve_sublayer
from kbert.models.gpt2 import END_ID, GPT2

FUSED_ATTENTION = "attn.c_attn"
# The parts `c_attn` is split into, in its order, and the kbert projection each fills.
_SPLIT = {"q": "query_dense", "k": "key_dense", "v": "value_dense"}

# The HF module of each sublayer of a block, relative to `h.<i>.`.
GPT2_BLOCK = {
    "attention_layer_norm": "ln_1",
    **{f"attention_layer.{dense}": f"{FUSED_ATTENTION}.{part}" for part, dense in _SPLIT.items()},
    "attention_layer.output_dense": "attn.c_proj",
    "output_layer_norm": "ln_2",
    "intermediate_dense": "mlp.c_fc",
    "output_dense": "mlp.c_proj",
}
GPT2_BACKBONE = {"token_embedding": "wte", "position_embedding": "wpe", "final_layer_norm": "ln_f"}

# Config options kbert's GPT2 does not represent, with the value it implies.
_FIXED_OPTIONS = {
    "add_cross_attention": False,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
}


def fused_parts(name):
    """The names the tensor `name` becomes: three for a fused `attn.c_attn` tensor, else itself.

    >>> fused_parts("h.0.attn.c_attn.bias")
    ['h.0.attn.c_attn.q.bias', 'h.0.attn.c_attn.k.bias', 'h.0.attn.c_attn.v.bias']
    """
    stem, _, leaf = name.rpartition(".")
    if not stem.endswith(FUSED_ATTENTION):
        return [name]
    return [f"{stem}.{part}.{leaf}" for part in _SPLIT]


def split_fused_attention(tensors):
    """`tensors` with each `attn.c_attn` weight and bias split (last axis) into its `q`, `k`, `v`."""
    split = {}
    for name, array in tensors.items():
        parts = fused_parts(name)
        pieces = [array] if len(parts) == 1 else np.split(np.asarray(array), 3, axis=-1)
        split.update(zip(parts, pieces))
    return split


def join_fused_attention(tensors):
    """The inverse of `split_fused_attention`: each `attn.c_attn.{q,k,v}` triple joined (last axis) again.

    >>> joined = join_fused_attention({f"h.0.attn.c_attn.{p}.bias": np.ones(2) for p in "qkv"})
    >>> {name: array.shape for name, array in joined.items()}
    {'h.0.attn.c_attn.bias': (6,)}
    """
    joined = {}
    for name, array in tensors.items():
        stem, _, leaf = name.rpartition(".")
        fused, _, part = stem.rpartition(".")
        if not fused.endswith(FUSED_ATTENTION) or part not in _SPLIT:
            joined[name] = array
        elif part == "q":
            joined[f"{fused}.{leaf}"] = np.concatenate([tensors[f"{fused}.{p}.{leaf}"] for p in _SPLIT], axis=-1)
    return joined


class GPT2Converter(Converter):
    """GPT-2: the config mapping and the HF name of each `GPT2` sublayer.

    Example:
    >>> arguments = GPT2Converter().config_to_arguments({"vocab_size": 50, "n_embd": 8,
    ...     "n_layer": 1, "n_head": 2, "n_positions": 16, "eos_token_id": 49})
    >>> arguments["intermediate_dim"], arguments["end_id"]
    (32, 49)
    """

    model_types = ("gpt2",)
    task_prefix = "transformer."
    backbone_class = GPT2

    def config_to_arguments(self, config):
        check_fixed_options(config, _FIXED_OPTIONS, "GPT-2")
        activation = config.get("activation_function", "gelu_new")
        if kbert_activation(activation, "activation_function") != "gelu_approximate":
            raise ValueError(
                f"Unsupported GPT-2 activation_function {activation!r}: kbert's GPT2 uses tanh "
                "GELU (gelu_new)."
            )
        hidden = config["n_embd"]
        end_id = config.get("eos_token_id")
        return dict(
            vocabulary_size=config["vocab_size"],
            num_layers=config["n_layer"],
            num_heads=config["n_head"],
            hidden_dim=hidden,
            intermediate_dim=config.get("n_inner") or 4 * hidden,
            max_positions=config.get("n_positions", 1024),
            dropout=config.get("resid_pdrop", 0.1),
            layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
            end_id=END_ID if end_id is None else end_id,
        )

    def arguments_from_tensors(self, arguments, tensors):
        head = tensors.get("lm_head.weight")
        if head is not None and not np.array_equal(head, tensors.get("wte.weight")):
            raise ValueError(
                "This checkpoint's lm_head differs from its token embeddings (wte); kbert's "
                "GPT2 ties the two."
            )
        return arguments

    def ignored_tensors(self, backbone):
        # The causal-mask buffers of older checkpoints.
        return tuple(
            f"h.{index}.attn.{buffer}"
            for index in range(backbone.num_layers)
            for buffer in ("bias", "masked_bias")
        )

    def read_backbone(self, config, directory, overrides):
        backbone, tensors, must_read = super().read_backbone(config, directory, overrides)
        must_read = [part for name in must_read for part in fused_parts(name)]
        return backbone, split_fused_attention(tensors), must_read

    def sublayer_modules(self, backbone, tensors):
        pairs = [
            (resolve_sublayer(backbone, path, f"{self!r} {path!r}: {module!r}"), module)
            for path, module in GPT2_BACKBONE.items()
        ]
        blocks = resolve_sublayer(backbone, "transformer_layers", f"{self!r} blocks")
        pairs += self.block_modules(blocks, GPT2_BLOCK, "h.{i}.")
        return pairs

    def weight_names(self, backbone, tensors):
        # Conv1D weights are [in, out], as Keras kernels are: nothing is transposed.
        names = super().weight_names(backbone, tensors)
        return {path: (name, False) for path, (name, _) in names.items()}


register_converter(GPT2Converter())
