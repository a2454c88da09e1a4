"""The KerasHub bridge of two families KerasHub 0.32 has no Hugging Face loader for: ELECTRA and T5.

Each family is one `DirectFamily` record: the KerasHub backbone's
constructor arguments from a kbert backbone, the kbert arguments from a
KerasHub config, and the pairs of variables that hold the same numbers (kbert
variable path, KerasHub attribute path; every pair is the same values in
row-major order, so a reshape carries them either way). A kbert backbone
whose settings are not those that its KerasHub config gives back computes
another function there and is refused with the first such setting named.
"""

import os
import tempfile

import keras
import numpy as np

from kbert.checkpoints.tokenizer_files import write_tokenizer
from kbert.layers.activations import activation_name

_ACTIVATIONS = ("relu", "gelu", "gelu_approximate")


class DirectFamily:
    """How one family's backbone maps onto KerasHub's, variable for variable."""

    def __init__(self, class_name, keras_hub_config, kbert_arguments, variable_pairs):
        self.class_name = class_name
        self.keras_hub_config = keras_hub_config  # kbert backbone -> KerasHub constructor arguments
        self.kbert_arguments = kbert_arguments  # KerasHub get_config() -> kbert constructor arguments
        self.variable_pairs = variable_pairs  # kbert arguments -> [(kbert path, KerasHub attribute path)]


def _keras_hub_activation(activation, class_name):
    from keras_hub.src.utils.keras_utils import gelu_approximate

    name = activation_name(activation)
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation={name!r}: KerasHub's {class_name} takes one of {', '.join(_ACTIVATIONS)} here.")
    return gelu_approximate if name == "gelu_approximate" else name


def _kbert_activation(activation):
    function = keras.activations.get(activation)
    name = getattr(function, "__name__", str(activation))
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation={activation!r}: kbert's bridge takes one of {', '.join(_ACTIVATIONS)}.")
    return name


# --- ELECTRA ----------------------------------------------------------------

# kbert Encoder settings KerasHub's ElectraBackbone fixes (its blocks: post-LN, tanh GELU, eps 1e-12).
_ELECTRA_FIXED = dict(activation="gelu_approximate", layer_norm_epsilon=1e-12, normalize_first=False,
                      share_layers=False, position_offset=0, attention="dense", heads_per_layer=None)


def _electra_keras_hub_config(backbone):
    return dict(vocab_size=backbone.vocabulary_size, num_layers=backbone.num_layers, num_heads=backbone.num_heads,
                hidden_dim=backbone.hidden_dim, embedding_dim=backbone.embedding_dim or backbone.hidden_dim,
                intermediate_dim=backbone.intermediate_dim, dropout=backbone.dropout,
                max_sequence_length=backbone.max_positions, num_segments=backbone.num_segments)


def _electra_kbert_arguments(config):
    embedding_dim = None if config["embedding_dim"] == config["hidden_dim"] else config["embedding_dim"]
    return dict(vocabulary_size=config["vocab_size"], num_layers=config["num_layers"], num_heads=config["num_heads"],
                hidden_dim=config["hidden_dim"], intermediate_dim=config["intermediate_dim"],
                embedding_dim=embedding_dim, dropout=config["dropout"], max_positions=config["max_sequence_length"],
                num_segments=config["num_segments"], use_pooler=True, **_ELECTRA_FIXED)


_ELECTRA_BLOCK = {
    "attention_layer/query_dense": "_self_attention_layer._query_dense",
    "attention_layer/key_dense": "_self_attention_layer._key_dense",
    "attention_layer/value_dense": "_self_attention_layer._value_dense",
    "attention_layer/output_dense": "_self_attention_layer._output_dense",
    "intermediate_dense": "_feedforward_intermediate_dense",
    "output_dense": "_feedforward_output_dense",
}
_ELECTRA_NORMS = {"attention_layer_norm": "_self_attention_layer_norm", "output_layer_norm": "_feedforward_layer_norm"}


def _electra_pairs(arguments):
    pairs = [("embeddings/token_embedding/embeddings", "token_embedding.embeddings"),
             ("embeddings/position_embedding/embeddings", "position_embedding.position_embeddings"),
             ("embeddings/segment_embedding/embeddings", "segment_embedding.embeddings"),
             ("embeddings/layer_norm/gamma", "embeddings_layer_norm.gamma"),
             ("embeddings/layer_norm/beta", "embeddings_layer_norm.beta")]
    if arguments["embedding_dim"] is not None:
        pairs += [("embeddings/projection/kernel", "embeddings_projection.kernel"),
                  ("embeddings/projection/bias", "embeddings_projection.bias")]
    for i in range(arguments["num_layers"]):
        ours, theirs = f"transformer_layer_{i}/", f"transformer_layers.{i}."
        for kbert_name, keras_hub_name in _ELECTRA_BLOCK.items():
            pairs += [(ours + kbert_name + "/" + v, theirs + keras_hub_name + "." + v) for v in ("kernel", "bias")]
        for kbert_name, keras_hub_name in _ELECTRA_NORMS.items():
            pairs += [(ours + kbert_name + "/" + v, theirs + keras_hub_name + "." + v) for v in ("gamma", "beta")]
    if arguments["use_pooler"]:
        pairs += [("pooler/dense/kernel", "pooled_dense.kernel"), ("pooler/dense/bias", "pooled_dense.bias")]
    return pairs


# --- T5 ---------------------------------------------------------------------

# kbert T5 settings KerasHub's T5Backbone fixes: its relative position buckets and distance, equal stacks.
_T5_FIXED = dict(num_buckets=32, max_distance=128, encoder_layer_heads=None, decoder_layer_heads=None,
                 cross_attention_heads_per_layer=None)


def _t5_keras_hub_config(backbone):
    return dict(vocabulary_size=backbone.vocabulary_size, num_layers=backbone.num_layers,
                num_heads=backbone.num_heads, hidden_dim=backbone.hidden_dim,
                intermediate_dim=backbone.intermediate_dim, key_value_dim=backbone.key_dim,
                dropout=backbone.dropout, activation=_keras_hub_activation(backbone.activation, "T5Backbone"),
                use_gated_activation=backbone.use_gated_activation, layer_norm_epsilon=backbone.layer_norm_epsilon,
                tie_embedding_weights=backbone.tie_embeddings)


def _t5_kbert_arguments(config):
    return dict(vocabulary_size=config["vocabulary_size"], num_layers=config["num_layers"],
                num_decoder_layers=config["num_layers"], num_heads=config["num_heads"],
                hidden_dim=config["hidden_dim"], intermediate_dim=config["intermediate_dim"],
                key_dim=config["key_value_dim"], dropout=config["dropout"],
                activation=_kbert_activation(config["activation"]),
                use_gated_activation=config["use_gated_activation"], layer_norm_epsilon=config["layer_norm_epsilon"],
                tie_embeddings=config["tie_embedding_weights"], **_T5_FIXED)


_T5_DENSES = {"intermediate_dense": "input_projector", "output_dense": "output_projector"}
_T5_ATTENTION = {"query_dense": "query_projector", "key_dense": "key_projector", "value_dense": "value_projector",
                 "output_dense": "output_projector"}


def _t5_pairs(arguments):
    pairs = [("token_embedding/embeddings", "token_embedding.embeddings")]
    if not arguments["tie_embeddings"]:
        pairs.append(("lm_head/kernel", "token_embedding.reverse_embeddings"))
    denses = dict(_T5_DENSES, **({"gate_dense": "gate_projector"} if arguments["use_gated_activation"] else {}))
    for stack in ("encoder", "decoder"):
        pairs += [(f"{stack}_position_bias/embeddings",
                   f"{stack}_transformer_layers.0.self_attention.relative_attention_bias"),
                  (f"{stack}_final_layer_norm/scale", f"{stack}_layer_norm.weight")]
        for i in range(arguments["num_layers"]):
            ours, theirs = f"{stack}_layer_{i}/", f"{stack}_transformer_layers.{i}."
            attentions = ("self_attention", "cross_attention") if stack == "decoder" else ("self_attention",)
            for attention in attentions:
                pairs += [(f"{ours}{attention}/{kbert_name}/kernel", f"{theirs}{attention}.{keras_hub_name}.kernel")
                          for kbert_name, keras_hub_name in _T5_ATTENTION.items()]
                pairs.append((f"{ours}{attention}_layer_norm/scale", f"{theirs}{attention}_layer_norm.weight"))
            pairs += [(f"{ours}{kbert_name}/kernel", f"{theirs}{keras_hub_name}.kernel")
                      for kbert_name, keras_hub_name in denses.items()]
            pairs.append((f"{ours}ffn_layer_norm/scale", f"{theirs}layer_norm.weight"))
    return pairs


DIRECT_FAMILIES = {
    "electra": DirectFamily("ElectraBackbone", _electra_keras_hub_config, _electra_kbert_arguments, _electra_pairs),
    "t5": DirectFamily("T5Backbone", _t5_keras_hub_config, _t5_kbert_arguments, _t5_pairs),
}


# --- Both ways ----------------------------------------------------------------

def _attribute(model, path):
    value = model
    for part in path.split("."):
        value = value[int(part)] if part.isdigit() else getattr(value, part)
    return value


def _pairs(family, arguments, backbone, keras_hub_backbone):
    variables = {variable.path: variable for variable in backbone.weights}
    return [(variables[ours], _attribute(keras_hub_backbone, theirs))
            for ours, theirs in DIRECT_FAMILIES[family].variable_pairs(arguments)]


def _copy(source, target):
    target.assign(np.reshape(keras.ops.convert_to_numpy(source.value), target.shape))


def _check_expressed(family, backbone, arguments):
    """Refuse `backbone` by the first setting that the KerasHub backbone computes otherwise."""
    config = backbone.get_config()
    for argument, value in arguments.items():
        ours = config.get(argument)
        if argument == "embedding_dim" and ours == config["hidden_dim"]:
            ours = None  # an embedding width equal to the hidden width: no projection, as KerasHub's
        if argument == "use_pooler" or ours == value:
            continue
        raise ValueError(f"{argument}={ours!r}: KerasHub's {DIRECT_FAMILIES[family].class_name} "
                         f"computes {argument}={value!r}.")


def to_keras_hub_backbone(family, backbone):
    """KerasHub's backbone of `family` holding the weights of kbert's `backbone`."""
    import keras_hub

    direct = DIRECT_FAMILIES[family]
    config = direct.keras_hub_config(backbone)
    arguments = direct.kbert_arguments(config)
    _check_expressed(family, backbone, arguments)
    keras_hub_backbone = getattr(keras_hub.models, direct.class_name)(**config, dtype="float32")
    arguments["use_pooler"] = getattr(backbone, "use_pooler", False)  # without one, KerasHub's stays as built
    for ours, theirs in _pairs(family, arguments, backbone, keras_hub_backbone):
        _copy(ours, theirs)
    return keras_hub_backbone


def keras_hub_tokenizer(family, tokenizer):
    """KerasHub's tokenizer of `family` reading kbert's `tokenizer`'s files; None for another kind of tokenizer."""
    import keras_hub

    kind = {"electra": "WordPieceTokenizer", "t5": "SentencePieceTokenizer"}[family]
    if type(tokenizer).__name__ != kind:
        return None
    with tempfile.TemporaryDirectory() as folder:
        write_tokenizer(tokenizer, folder, family)
        if family == "electra":
            strip_accents = tokenizer.lowercase if tokenizer.strip_accents is None else tokenizer.strip_accents
            return keras_hub.models.ElectraTokenizer(os.path.join(folder, "vocab.txt"), lowercase=tokenizer.lowercase,
                                                     strip_accents=strip_accents,
                                                     split_on_cjk=tokenizer.split_on_cjk)
        return keras_hub.models.T5Tokenizer(os.path.join(folder, "spiece.model"))


def from_keras_hub_backbone(family, keras_hub_backbone):
    """kbert's backbone of `family` holding the weights of KerasHub's backbone."""
    from kbert.models.encoder import Encoder
    from kbert.models.t5 import T5

    arguments = DIRECT_FAMILIES[family].kbert_arguments(keras_hub_backbone.get_config())
    backbone = {"electra": Encoder, "t5": T5}[family](**arguments)
    for ours, theirs in _pairs(family, arguments, backbone, keras_hub_backbone):
        _copy(theirs, ours)
    return backbone
