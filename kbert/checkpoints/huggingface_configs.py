"""A kbert backbone's Hugging Face `config.json`: the inverse of the converters' `config_to_arguments`.

`encoder_model_types(backbone)` lists the families whose config can describe
an `Encoder`, most likely first; `huggingface_config(model_type, backbone,
pad_id)` writes that family's config keys; `unexpressed_setting` reads the
config back through the family's registered converter and names the first
constructor argument of the backbone that comes back different: a setting
no transformers class of that family expresses. The position table of the
RoBERTa-style families is renumbered in `roberta_position_table` (transformers
numbers a token's position from `pad_token_id + 1`, docs/algorithms.md §4).

>>> import kbert
>>> backbone = kbert.models.bert_tiny(num_layers=1, normalize_first=True)
>>> encoder_model_types(backbone)
['roberta-prelayernorm']
>>> huggingface_config("roberta-prelayernorm", backbone, pad_id=0)["max_position_embeddings"]
513
"""

import inspect

import numpy as np

from kbert.checkpoints.registry import converter_for
from kbert.layers.activations import activation_name
from kbert.models.bart import BART
from kbert.models.encoder import Encoder
from kbert.models.gpt2 import GPT2
from kbert.models.t5 import T5
from kbert.models.xlnet import XLNet

# The Hugging Face name of each kbert activation.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu", "silu": "silu", "tanh": "tanh"}
# Families whose positions transformers numbers from `pad_token_id + 1`.
ROBERTA_POSITIONS = ("roberta", "roberta-prelayernorm", "longformer")
# What a family's config does not carry over one to one (renumbered, or read from the tensors).
_MAPPED = {"use_pooler": None, "dtype": None, "name": None, "trainable": None}
_POSITION_MAPPED = ("max_positions", "position_offset")
_EMPTY = (None, {}, [])


def _hf_activation(backbone, option="activation"):
    name = activation_name(backbone.activation) if isinstance(backbone.activation, str) else None
    if name not in HF_ACTIVATIONS:
        raise ValueError(f"activation={backbone.activation!r} has no transformers name; "
                         f"expressible: {sorted(HF_ACTIVATIONS)}.")
    return HF_ACTIVATIONS[name]


def encoder_model_types(backbone):
    """The `model_type`s whose transformers classes can hold the `Encoder` `backbone`, most likely first."""
    if backbone.attention == "longformer":
        return ["longformer"]
    if backbone.attention == "bigbird":
        return ["big_bird"]
    if backbone.normalize_first:
        return ["roberta-prelayernorm"]
    if backbone.share_layers:
        return ["albert"]
    if backbone.num_segments == 0:
        return ["distilbert"]
    if backbone.embedding_dim not in (None, backbone.hidden_dim):
        return ["electra"]
    return ["roberta"] if backbone.position_offset else ["bert", "electra"]


def _encoder_config(backbone):
    return dict(
        vocab_size=backbone.vocabulary_size,
        hidden_size=backbone.hidden_dim,
        num_hidden_layers=backbone.num_layers,
        num_attention_heads=backbone.num_heads,
        intermediate_size=backbone.intermediate_dim,
        max_position_embeddings=backbone.max_positions,
        type_vocab_size=backbone.num_segments,
        hidden_act=_hf_activation(backbone),
        layer_norm_eps=backbone.layer_norm_epsilon,
        hidden_dropout_prob=backbone.dropout,
        attention_probs_dropout_prob=backbone.attention_dropout,
        initializer_range=backbone.initializer_range,
    )


def _roberta_config(backbone, pad_id):
    rows = backbone.max_positions - backbone.position_offset + pad_id + 1  # see roberta_position_table
    return dict(_encoder_config(backbone), pad_token_id=pad_id, max_position_embeddings=rows)


def roberta_position_table(table, position_offset, pad_id):
    """The position table transformers reads for pad `pad_id` (row `pad_id + 1 + i` for token `i`).

    kbert's token `i` reads row `position_offset + i`; the rows before
    `pad_id + 1` are never read for a real token and are zeros when renumbered.

    >>> roberta_position_table(np.ones((4, 2)), 0, 1)[:, 0].tolist()
    [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    """
    if position_offset == pad_id + 1:
        return table
    return np.concatenate([np.zeros((pad_id + 1, table.shape[1]), table.dtype), table[position_offset:]])


def _longformer_config(backbone, pad_id):
    kwargs = backbone.attention_kwargs
    windows = [k["window"] for k in kwargs] if isinstance(kwargs, list) else [kwargs["window"]] * backbone.num_layers
    return dict(_roberta_config(backbone, pad_id), attention_window=[2 * w for w in windows])


def _big_bird_config(backbone, pad_id):
    kwargs = backbone.attention_kwargs
    first = kwargs[0] if isinstance(kwargs, list) else kwargs
    sizes = {(k.get("block_size", 64), k.get("num_random_blocks", 3)) for k in (kwargs if isinstance(kwargs, list)
                                                                             else [kwargs])}
    if len(sizes) > 1:
        raise ValueError(f"attention_kwargs={kwargs!r}: BigBird's config has one block_size and "
                         "num_random_blocks for every layer.")
    return dict(_encoder_config(backbone), pad_token_id=pad_id, attention_type="block_sparse",
                block_size=first.get("block_size", 64), num_random_blocks=first.get("num_random_blocks", 3),
                rescale_embeddings=False, use_bias=True)


def _distilbert_config(backbone, pad_id):
    return dict(vocab_size=backbone.vocabulary_size, dim=backbone.hidden_dim, n_layers=backbone.num_layers,
                n_heads=backbone.num_heads, hidden_dim=backbone.intermediate_dim,
                max_position_embeddings=backbone.max_positions, activation=_hf_activation(backbone),
                dropout=backbone.dropout, attention_dropout=backbone.attention_dropout,
                initializer_range=backbone.initializer_range, sinusoidal_pos_embds=False, pad_token_id=pad_id)


def _embedding_config(backbone, pad_id):
    """ELECTRA's and ALBERT's: BERT's keys and the embedding width."""
    return dict(_encoder_config(backbone), pad_token_id=pad_id,
                embedding_size=backbone.embedding_dim or backbone.hidden_dim)


def _t5_config(backbone, pad_id):
    gated = "gated-" if backbone.use_gated_activation else ""
    return dict(
        vocab_size=backbone.vocabulary_size, d_model=backbone.hidden_dim, d_kv=backbone.head_dim,
        d_ff=backbone.intermediate_dim, num_layers=backbone.num_layers,
        num_decoder_layers=backbone.num_decoder_layers, num_heads=backbone.num_heads,
        relative_attention_num_buckets=backbone.num_buckets,
        relative_attention_max_distance=backbone.max_distance, dropout_rate=backbone.dropout,
        layer_norm_epsilon=backbone.layer_norm_epsilon, initializer_factor=backbone.initializer_factor,
        feed_forward_proj=gated + ("gelu" if gated and backbone.activation == "gelu_approximate"
                                   else _hf_activation(backbone)),
        tie_word_embeddings=bool(backbone.tie_embeddings), scale_decoder_outputs=bool(backbone.tie_embeddings),
        is_encoder_decoder=True, pad_token_id=backbone.pad_id, eos_token_id=backbone.end_id,
        decoder_start_token_id=backbone.decoder_start_id,
    )


def _gpt2_config(backbone, pad_id):
    return dict(
        vocab_size=backbone.vocabulary_size, n_embd=backbone.hidden_dim, n_layer=backbone.num_layers,
        n_head=backbone.num_heads, n_inner=backbone.intermediate_dim, n_positions=backbone.max_positions,
        resid_pdrop=backbone.dropout, embd_pdrop=backbone.dropout, attn_pdrop=backbone.dropout,
        layer_norm_epsilon=backbone.layer_norm_epsilon, activation_function="gelu_new",
        bos_token_id=backbone.end_id, eos_token_id=backbone.end_id, tie_word_embeddings=True,
    )


def _bart_config(backbone, pad_id):
    return dict(
        vocab_size=backbone.vocabulary_size, d_model=backbone.hidden_dim, encoder_layers=backbone.num_layers,
        decoder_layers=backbone.num_decoder_layers, num_hidden_layers=backbone.num_layers,
        encoder_attention_heads=backbone.num_heads, decoder_attention_heads=backbone.num_heads,
        encoder_ffn_dim=backbone.intermediate_dim, decoder_ffn_dim=backbone.intermediate_dim,
        max_position_embeddings=backbone.max_positions, activation_function=_hf_activation(backbone),
        dropout=backbone.dropout,
        scale_embedding=bool(backbone.scale_embedding), init_std=backbone.initializer_range,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2,
        is_encoder_decoder=True, tie_word_embeddings=True,
    )


def _xlnet_config(backbone, pad_id):
    return dict(
        vocab_size=backbone.vocabulary_size, d_model=backbone.hidden_dim, n_layer=backbone.num_layers,
        n_head=backbone.num_heads, d_head=backbone.hidden_dim // backbone.num_heads,
        d_inner=backbone.intermediate_dim, ff_activation=_hf_activation(backbone),
        layer_norm_eps=backbone.layer_norm_epsilon, dropout=backbone.dropout, clamp_len=backbone.clamp_length,
        attn_type="bi", bi_data=False, pad_token_id=pad_id,
    )


_CONFIGS = {
    "bert": lambda backbone, pad_id: dict(_encoder_config(backbone), pad_token_id=pad_id),
    "roberta": _roberta_config,
    "roberta-prelayernorm": _roberta_config,
    "longformer": _longformer_config,
    "big_bird": _big_bird_config,
    "albert": lambda backbone, pad_id: dict(_embedding_config(backbone, pad_id), num_hidden_groups=1,
                                            inner_group_num=1),
    "electra": _embedding_config,
    "distilbert": _distilbert_config,
    "t5": _t5_config,
    "gpt2": _gpt2_config,
    "bart": _bart_config,
    "xlnet": _xlnet_config,
}
# The model_type of each backbone class with one family.
BACKBONE_MODEL_TYPES = {T5: "t5", GPT2: "gpt2", BART: "bart", XLNet: "xlnet"}


def backbone_model_types(backbone):
    """The `model_type`s that can hold `backbone`, most likely first; a `ValueError` for a class with none."""
    if isinstance(backbone, Encoder):
        return encoder_model_types(backbone)
    for backbone_class, model_type in BACKBONE_MODEL_TYPES.items():
        if isinstance(backbone, backbone_class):
            return [model_type]
    raise ValueError(f"{type(backbone).__name__} has no transformers class; exportable backbones: "
                     "Encoder (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, BigBird, Longformer, pre-LN), "
                     "T5, GPT2, BART, XLNet.")


def huggingface_config(model_type, backbone, pad_id):
    """The `config.json` keys of `backbone` as a `model_type` model (no `architectures` yet)."""
    return {"model_type": model_type, **_CONFIGS[model_type](backbone, pad_id)}


def unexpressed_setting(model_type, backbone, config):
    """The first `(argument, value, what the config gives)` of `backbone` that `config` does not express; None."""
    given = converter_for(model_type).config_to_arguments(config)
    parameters = inspect.signature(type(backbone).__init__).parameters
    skipped = set(_MAPPED) | (set(_POSITION_MAPPED) if model_type in ROBERTA_POSITIONS else set())
    if model_type == "big_bird":  # the random blocks' seeds: no fixed plan matches transformers' (see the converter)
        skipped.add("attention_kwargs")
    for argument, value in backbone.get_config().items():
        if argument in skipped or argument not in parameters:
            continue
        expected = given.get(argument, parameters[argument].default)
        empty = value in _EMPTY and expected in _EMPTY  # an argument left out is stored as {} or []
        if value != expected and not empty:
            return argument, value, expected
    return None
