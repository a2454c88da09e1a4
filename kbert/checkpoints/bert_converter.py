"""Hugging Face BERT-style checkpoints into a kbert `Encoder`.

Registers `BertConverter`s for these `model_type`s:

- `bert`; `roberta`, `xlm-roberta`, `camembert` (the same architecture:
  positions numbered from `pad_token_id + 1`, see docs/algorithms.md §4);
- `albert` (factorized embedding and one shared block: `num_hidden_groups`
  and `inner_group_num` must be 1, and `embedding_size` must differ from
  `hidden_size`, because kbert has no E→H projection when they are equal);
- `electra` (the discriminator or generator backbone, with
  `embeddings_project` when `embedding_size != hidden_size`; no pooler);
- `distilbert` (no segment embedding, no pooler; a sinusoidal position table
  is fine as long as it is stored in the checkpoint, which it is for
  checkpoints that `transformers` writes);
- `roberta-prelayernorm` (RoBERTa's positions, pre-LN blocks: each block's
  `attention.LayerNorm` and `intermediate.LayerNorm` come before their
  sublayer, and a final `LayerNorm` follows the stack: kbert's
  `normalize_first=True`).

Only absolute position embeddings and bidirectional encoders are supported
(`position_embedding_type="absolute"`, `is_decoder=False`). Task checkpoints
(`BertForMaskedLM`, `RobertaForSequenceClassification`, `ElectraForPreTraining`
…) load too: the task prefix (`bert.`, `roberta.` …) is stripped and head
tensors are ignored. The pooler is built when the checkpoint has one
(masked-LM checkpoints usually do not).
"""

from kbert.checkpoints.converter import Converter
from kbert.checkpoints.registry import register_converter
from kbert.checkpoints.weight_mapping import kbert_activation, resolve_sublayer
from kbert.models.encoder import Encoder

# --- Configuration ---------------------------------------------------------


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


def bert_arguments(config):
    """`Encoder` arguments for the BERT-style config keys.

    >>> bert_arguments({"vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1,
    ...                 "num_attention_heads": 2, "intermediate_size": 16,
    ...                 "hidden_act": "gelu_new"})["activation"]
    'gelu_approximate'
    """
    _check_bert_like(config)
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_positions=config.get("max_position_embeddings", 512),
        num_segments=config.get("type_vocab_size", 2),
        activation=kbert_activation(config.get("hidden_act", "gelu")),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        initializer_range=config.get("initializer_range", 0.02),
    )


def roberta_arguments(config):
    """`bert_arguments` with positions numbered from `pad_token_id + 1` (docs/algorithms.md §4)."""
    return dict(bert_arguments(config), position_offset=config.get("pad_token_id", 1) + 1)


def _pre_layer_norm_arguments(config):
    return dict(roberta_arguments(config), normalize_first=True)


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
    return dict(bert_arguments(config), embedding_dim=embedding_dim, share_layers=True)


def _electra_arguments(config):
    return dict(
        bert_arguments(config),
        embedding_dim=config.get("embedding_size", config["hidden_size"]),
        use_pooler=False,
    )


# DistilBERT's config keys for the BERT ones.
_DISTILBERT_KEYS = {
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "dim": "hidden_size",
    "hidden_dim": "intermediate_size",
    "activation": "hidden_act",
    "dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
}


def _distilbert_arguments(config):
    bert_config = {_DISTILBERT_KEYS.get(key, key): value for key, value in config.items()}
    # No segment table; the LayerNorm epsilon is fixed in HF:distilbert.
    bert_config.update(type_vocab_size=0, layer_norm_eps=1e-12)
    return dict(bert_arguments(bert_config), use_pooler=False)


# --- Weight names ----------------------------------------------------------

_QUERY = "attention_layer.query_dense"
_KEY = "attention_layer.key_dense"
_VALUE = "attention_layer.value_dense"
_ATTENTION_OUTPUT = "attention_layer.output_dense"

# The HF module of each sublayer of an encoder block (relative to the block).
BERT_BLOCK = {
    _QUERY: "attention.self.query",
    _KEY: "attention.self.key",
    _VALUE: "attention.self.value",
    _ATTENTION_OUTPUT: "attention.output.dense",
    "attention_layer_norm": "attention.output.LayerNorm",
    "intermediate_dense": "intermediate.dense",
    "output_dense": "output.dense",
    "output_layer_norm": "output.LayerNorm",
}
# The HF module of each sublayer of the `TextEmbedding`.
BERT_EMBEDDINGS = {
    "token_embedding": "embeddings.word_embeddings",
    "position_embedding": "embeddings.position_embeddings",
    "segment_embedding": "embeddings.token_type_embeddings",
    "layer_norm": "embeddings.LayerNorm",
}


class BertConverter(Converter):
    """A BERT-style family: its config mapping and the HF name of each `Encoder` sublayer.

    The weight names default to those of `BertModel`.

    Args:
        model_types: the `model_type`s it reads.
        task_prefix: the backbone's prefix in task checkpoints (`"bert."`).
        arguments: `config -> Encoder arguments`.
        embeddings: `{TextEmbedding attribute: HF module}`.
        block: the HF prefix of block `{i}` (ALBERT's one shared block has a fixed one).
        block_names: `{attribute path in an encoder block: HF module}`.
        pooler: the HF module of the pooler's dense layer, or None (no pooler).
        final_layer_norm: the HF module of the LayerNorm after the stack (pre-LN), or None.

    Example:
    >>> from kbert.checkpoints.registry import converter_for
    >>> converter_for("albert").block_names["intermediate_dense"]
    'ffn'
    """

    backbone_class = Encoder

    def __init__(
        self,
        model_types,
        task_prefix,
        arguments,
        embeddings=BERT_EMBEDDINGS,
        block="encoder.layer.{i}.",
        block_names=BERT_BLOCK,
        pooler="pooler.dense",
        final_layer_norm=None,
    ):
        self.model_types = tuple(model_types)
        self.task_prefix = task_prefix
        self.arguments = arguments
        self.embeddings = dict(embeddings)
        self.block = block
        self.block_names = dict(block_names)
        self.pooler = pooler
        self.final_layer_norm = final_layer_norm

    def config_to_arguments(self, config):
        return self.arguments(config)

    def arguments_from_tensors(self, arguments, tensors):
        if self.pooler is None or "use_pooler" in arguments:  # no pooler, or the caller's choice
            return arguments
        return dict(arguments, use_pooler=f"{self.pooler}.weight" in tensors)

    def absent_parts(self, tensors, overrides):
        # Token-classification and question-answering checkpoints have no pooler.
        if self.pooler is None or "use_pooler" in overrides or f"{self.pooler}.weight" in tensors:
            return ()
        return (
            f"pooler ({self.pooler}.weight): the backbone is built with use_pooler=False, so "
            "its pooled_output is the first token's hidden state (pass use_pooler=False to "
            "choose this without a warning)",
        )

    def ignored_tensors(self, backbone):
        if self.pooler is None or backbone.pooler is not None:
            return ()
        return (f"{self.pooler}.weight", f"{self.pooler}.bias")  # use_pooler=False chosen

    def missing_tensor_hint(self, config):
        if config.get("sinusoidal_pos_embds"):
            return (
                " (sinusoidal_pos_embds=True: the position table must be stored "
                "in the checkpoint)"
            )
        return ""

    def sublayer_modules(self, backbone, tensors):
        pairs = []
        embeddings = resolve_sublayer(backbone, "embeddings", f"{self!r} embeddings")
        for attribute, module in self.embeddings.items():
            layer = resolve_sublayer(embeddings, attribute, f"{self!r} {attribute!r}: {module!r}")
            if layer is not None:  # e.g. no segment table, no projection
                pairs.append((layer, module))
        blocks = resolve_sublayer(backbone, "transformer_layers", f"{self!r} blocks")
        pairs += self.block_modules(blocks, self.block_names, self.block)
        final = resolve_sublayer(backbone, "final_layer_norm", f"{self!r} final_layer_norm")
        if final is not None:
            if self.final_layer_norm is None:
                raise ValueError(f"{self!r} has no final LayerNorm; build the model with normalize_first=False.")
            pairs.append((final, self.final_layer_norm))
        if resolve_sublayer(backbone, "pooler", f"{self!r} pooler") is not None:
            if self.pooler is None:
                raise ValueError(
                    "This checkpoint family has no pooler weights; build the model "
                    "with use_pooler=False (the default for it)."
                )
            path = "pooler.dense"
            entry = f"{self!r} pooler: {self.pooler!r}"
            pairs.append((resolve_sublayer(backbone, path, entry), self.pooler))
        return pairs


register_converter(BertConverter(("bert",), "bert.", bert_arguments))
register_converter(
    BertConverter(("roberta", "xlm-roberta", "camembert"), "roberta.", roberta_arguments)
)
register_converter(
    BertConverter(
        ("albert",),
        "albert.",
        _albert_arguments,
        embeddings={**BERT_EMBEDDINGS, "projection": "encoder.embedding_hidden_mapping_in"},
        block="encoder.albert_layer_groups.0.albert_layers.0.",
        block_names={
            _QUERY: "attention.query",
            _KEY: "attention.key",
            _VALUE: "attention.value",
            _ATTENTION_OUTPUT: "attention.dense",
            "attention_layer_norm": "attention.LayerNorm",
            "intermediate_dense": "ffn",
            "output_dense": "ffn_output",
            "output_layer_norm": "full_layer_layer_norm",
        },
        pooler="pooler",
    )
)
register_converter(
    BertConverter(
        ("electra",),
        "electra.",
        _electra_arguments,
        embeddings={**BERT_EMBEDDINGS, "projection": "embeddings_project"},
        pooler=None,
    )
)
register_converter(
    BertConverter(
        ("distilbert",),
        "distilbert.",
        _distilbert_arguments,
        embeddings={
            "token_embedding": "embeddings.word_embeddings",
            "position_embedding": "embeddings.position_embeddings",
            "layer_norm": "embeddings.LayerNorm",
        },
        block="transformer.layer.{i}.",
        block_names={
            _QUERY: "attention.q_lin",
            _KEY: "attention.k_lin",
            _VALUE: "attention.v_lin",
            _ATTENTION_OUTPUT: "attention.out_lin",
            "attention_layer_norm": "sa_layer_norm",
            "intermediate_dense": "ffn.lin1",
            "output_dense": "ffn.lin2",
            "output_layer_norm": "output_layer_norm",
        },
        pooler=None,
    )
)
register_converter(
    BertConverter(
        ("roberta-prelayernorm",),
        "roberta_prelayernorm.",
        _pre_layer_norm_arguments,
        block_names={
            **{path: module for path, module in BERT_BLOCK.items() if "layer_norm" not in path},
            "attention_layer_norm": "attention.LayerNorm",
            "output_layer_norm": "intermediate.LayerNorm",
        },
        final_layer_norm="LayerNorm",
    )
)
