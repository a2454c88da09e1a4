"""The sublayer names that other packages rely on, declared in one place.

Two kinds of name leave the layer that sets them:

- Keras names (the `name=` of a sublayer) make up variable paths such as
  `transformer_layer_0/attention/query/kernel`: `kbert.distribute` shards
  variables by them and `kbert.models.long_context` maps Longformer's global
  projections onto the local ones by them.
- Attribute paths (`attention_layer.query_dense` from an encoder block) are
  what the checkpoint converters follow from a built backbone to each layer
  whose weights they fill.

A layer that renames one of these must change it here; the packages that
read it build their patterns and maps from these constants, and
tests/layers/test_sublayer_names.py builds a model of each family and names
any rule, converter entry or variable path that no longer resolves.

>>> f"transformer_layer_0/{ATTENTION}/{QUERY_GLOBAL}/kernel"
'transformer_layer_0/attention/query_global/kernel'
>>> attribute_path(ATTENTION_LAYER, QUERY_DENSE)
'attention_layer.query_dense'
"""

# --- Keras names (parts of variable paths) ----------------------------------

# The projections of every attention layer; Longformer adds `<name>_global`.
QUERY = "query"
KEY = "key"
VALUE = "value"
OUTPUT = "output"  # also the second feed-forward layer of a block
GLOBAL_SUFFIX = "_global"
QUERY_GLOBAL = QUERY + GLOBAL_SUFFIX
KEY_GLOBAL = KEY + GLOBAL_SUFFIX
VALUE_GLOBAL = VALUE + GLOBAL_SUFFIX

# An encoder block's attention layer; T5's blocks have a self- and a cross-attention.
ATTENTION = "attention"
SELF_ATTENTION = "self_attention"
CROSS_ATTENTION = "cross_attention"

# A block's feed-forward layers: the first (and its gate) and, named OUTPUT, the second.
INTERMEDIATE = "intermediate"
GATE = "gate"

# Blocks are named `<something>layer` or `<something>layer_<index>`
# (`transformer_layer_0`, `shared_transformer_layer`, `decoder_layer_1`).
BLOCK_NAME_END = "layer"

TOKEN_EMBEDDING = "token_embedding"
LM_HEAD = "lm_head"

# --- Attribute names (what converters follow) -------------------------------

# An attention layer's projections.
QUERY_DENSE = "query_dense"
KEY_DENSE = "key_dense"
VALUE_DENSE = "value_dense"
OUTPUT_DENSE = "output_dense"  # also a block's second feed-forward layer
QUERY_GLOBAL_DENSE = "query_global_dense"
KEY_GLOBAL_DENSE = "key_global_dense"
VALUE_GLOBAL_DENSE = "value_global_dense"

# A `TransformerEncoder` block.
ATTENTION_LAYER = "attention_layer"
ATTENTION_LAYER_NORM = "attention_layer_norm"
INTERMEDIATE_DENSE = "intermediate_dense"
OUTPUT_LAYER_NORM = "output_layer_norm"

# A T5 block (`self_attention`, `cross_attention` as above).
SELF_ATTENTION_LAYER_NORM = "self_attention_layer_norm"
CROSS_ATTENTION_LAYER_NORM = "cross_attention_layer_norm"
FFN_LAYER_NORM = "ffn_layer_norm"
GATE_DENSE = "gate_dense"

# An `Encoder` backbone, its `TextEmbedding` and its `Pooler`.
EMBEDDINGS = "embeddings"
TRANSFORMER_LAYERS = "transformer_layers"
POOLER = "pooler"
POSITION_EMBEDDING = "position_embedding"
SEGMENT_EMBEDDING = "segment_embedding"
EMBEDDING_LAYER_NORM = "layer_norm"
EMBEDDING_PROJECTION = "projection"
POOLER_DENSE = "dense"

# A `T5` backbone (`token_embedding` and `lm_head` as above).
ENCODER_LAYERS = "encoder_layers"
DECODER_LAYERS = "decoder_layers"
ENCODER_POSITION_BIAS = "encoder_position_bias"
DECODER_POSITION_BIAS = "decoder_position_bias"
ENCODER_FINAL_LAYER_NORM = "encoder_final_layer_norm"
DECODER_FINAL_LAYER_NORM = "decoder_final_layer_norm"

# A `BART` backbone (`token_embedding`, `lm_head`, the stacks' layers as above).
ENCODER_POSITION_EMBEDDING = "encoder_position_embedding"
DECODER_POSITION_EMBEDDING = "decoder_position_embedding"
ENCODER_EMBEDDING_LAYER_NORM = "encoder_embedding_layer_norm"
DECODER_EMBEDDING_LAYER_NORM = "decoder_embedding_layer_norm"


# A `GPT2` backbone (`token_embedding`, `position_embedding` and
# `transformer_layers` as above).
FINAL_LAYER_NORM = "final_layer_norm"


def attribute_path(*names):
    """The dotted attribute path through `names`, as converters write it.

    >>> attribute_path(EMBEDDINGS, TOKEN_EMBEDDING)
    'embeddings.token_embedding'
    """
    return ".".join(names)
