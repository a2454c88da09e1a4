import inspect

import keras

from kbert.layers.bigbird_attention import BigBirdAttention
from kbert.layers.longformer_attention import LongformerAttention
from kbert.layers.multi_head_attention import MultiHeadAttention
from kbert.layers.pooler import Pooler
from kbert.layers.text_embedding import TextEmbedding
from kbert.layers.transformer_encoder import TransformerEncoder

# Attention layers an `Encoder` can be built with, by name (sparse kernels
# are added here as they land); each takes `num_heads`, `key_dim`, `dropout`,
# `kernel_initializer`, `dtype`, `name` and the encoder's `attention_kwargs`.
ATTENTION_LAYERS = {
    "dense": MultiHeadAttention,
    "bigbird": BigBirdAttention,
    "longformer": LongformerAttention,
}


@keras.saving.register_keras_serializable(package="kbert")
class Encoder(keras.Model):
    """The BERT-family encoder backbone: embeddings, N encoder blocks, pooler.

    A functional `keras.Model` with dict inputs `token_ids`, `segment_ids`
    (absent when `num_segments=0`), `padding_mask`, and dict outputs
    `sequence_output` `(batch, sequence, hidden)` and `pooled_output`
    `(batch, hidden)`. One class covers BERT, RoBERTa (`position_offset=2`,
    `num_segments=1`), ALBERT (`embedding_dim < hidden_dim`,
    `share_layers=True`), ELECTRA (`embedding_dim`, no pooler) and DistilBERT
    (`num_segments=0`, no pooler). Without a pooler, `pooled_output` is the
    first token's hidden state, which is what those models' heads read.

    Args:
        vocabulary_size: rows of the token table.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: hidden width H.
        intermediate_dim: feed-forward width (usually 4H).
        max_positions: rows of the position table.
        num_segments: rows of the segment table (0: no segment input).
        embedding_dim: embedding width E; a Dense E→H follows when E ≠ H.
        share_layers: one set of block weights for every layer (ALBERT).
        position_offset: RoBERTa-style position numbering (see `TextEmbedding`).
        dropout: hidden dropout.
        attention_dropout: attention-probability dropout; defaults to `dropout`.
        activation: feed-forward activation (`"gelu"` = exact erf GELU).
        layer_norm_epsilon: LayerNorm epsilon.
        normalize_first: pre-LN blocks and a final LayerNorm.
        use_pooler: add the `tanh(Dense)` pooler.
        initializer_range: std of the truncated-normal initializer.
        attention: name in `ATTENTION_LAYERS` (`"dense"` by default).
        attention_kwargs: extra arguments for that attention layer: one dict
            for every layer, or a list of one dict per layer (Longformer's
            per-layer windows). An attention layer whose `call` takes a
            `global_attention_mask` (`"longformer"`) adds the optional input
            `global_attention_mask` (0/1 `(batch, sequence)`) to the model.
        dtype: dtype policy, e.g. `"mixed_bfloat16"`.

    Example:
    >>> encoder = Encoder(vocabulary_size=100, num_layers=2, num_heads=2,
    ...                   hidden_dim=16, intermediate_dim=32, max_positions=64)
    >>> outputs = encoder({"token_ids": keras.ops.ones((1, 8), "int32"),
    ...                    "segment_ids": keras.ops.zeros((1, 8), "int32"),
    ...                    "padding_mask": keras.ops.ones((1, 8), "int32")})
    >>> tuple(outputs["sequence_output"].shape), tuple(outputs["pooled_output"].shape)
    ((1, 8, 16), (1, 16))
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_positions=512,
        num_segments=2,
        embedding_dim=None,
        share_layers=False,
        position_offset=0,
        dropout=0.1,
        attention_dropout=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        normalize_first=False,
        use_pooler=True,
        initializer_range=0.02,
        attention="dense",
        attention_kwargs=None,
        dtype=None,
        **kwargs,
    ):
        if hidden_dim % num_heads:
            raise ValueError(
                f"hidden_dim={hidden_dim} is not divisible by num_heads={num_heads}."
            )
        if attention not in ATTENTION_LAYERS:
            raise ValueError(
                f"Unknown attention '{attention}'; known: {sorted(ATTENTION_LAYERS)}."
            )
        attention_dropout = dropout if attention_dropout is None else attention_dropout
        if isinstance(attention_kwargs, (list, tuple)):
            if len(attention_kwargs) != num_layers:
                raise ValueError(
                    f"attention_kwargs has {len(attention_kwargs)} per-layer entries "
                    f"for num_layers={num_layers}."
                )
            attention_kwargs = [dict(kwargs) for kwargs in attention_kwargs]
        else:
            attention_kwargs = dict(attention_kwargs or {})

        def initializer():
            return keras.initializers.TruncatedNormal(stddev=initializer_range)

        def block(index):
            attention_layer = ATTENTION_LAYERS[attention](
                num_heads=num_heads,
                key_dim=hidden_dim // num_heads,
                dropout=attention_dropout,
                kernel_initializer=initializer(),
                dtype=dtype,
                name="attention",
                **(
                    attention_kwargs[index]
                    if isinstance(attention_kwargs, list)
                    else attention_kwargs
                ),
            )
            return TransformerEncoder(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                dropout=dropout,
                attention_dropout=attention_dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                normalize_first=normalize_first,
                kernel_initializer=initializer(),
                attention_layer=attention_layer,
                dtype=dtype,
                name="shared_transformer_layer" if share_layers else f"transformer_layer_{index}",
            )

        # === Layers === (attributes are set after `super().__init__`, which
        # PyTorch modules require)
        embeddings = TextEmbedding(
            vocabulary_size=vocabulary_size,
            hidden_dim=hidden_dim,
            max_positions=max_positions,
            num_segments=num_segments,
            embedding_dim=embedding_dim,
            position_offset=position_offset,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range,
            dtype=dtype,
            name="embeddings",
        )
        if share_layers:
            transformer_layers = [block(0)] * num_layers
        else:
            transformer_layers = [block(i) for i in range(num_layers)]
        final_layer_norm = None
        if normalize_first:
            final_layer_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="final_layer_norm"
            )
        pooler = None
        if use_pooler:
            pooler = Pooler(
                hidden_dim, kernel_initializer=initializer(), dtype=dtype, name="pooler"
            )

        # === Functional graph ===
        inputs = {"token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids")}
        if num_segments > 0:
            inputs["segment_ids"] = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
        inputs["padding_mask"] = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        block_inputs = {"padding_mask": inputs["padding_mask"]}
        if "global_attention_mask" in inspect.signature(ATTENTION_LAYERS[attention].call).parameters:
            inputs["global_attention_mask"] = keras.Input(
                shape=(None,), dtype="int32", name="global_attention_mask", optional=True
            )
            block_inputs["global_attention_mask"] = inputs["global_attention_mask"]
        x = embeddings(
            inputs["token_ids"],
            segment_ids=inputs.get("segment_ids"),
            padding_mask=inputs["padding_mask"],
        )
        for layer in transformer_layers:
            x = layer(x, **block_inputs)
        if final_layer_norm is not None:
            x = final_layer_norm(x)
        pooled = pooler(x) if pooler is not None else x[:, 0, :]
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": x, "pooled_output": pooled},
            dtype=dtype,
            **kwargs,
        )
        # Functional models drop `dtype`; keep it so `dtype_policy` and the config carry it.
        self.dtype_policy = dtype

        self.embeddings = embeddings
        self.transformer_layers = transformer_layers
        self.final_layer_norm = final_layer_norm
        self.pooler = pooler

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.max_positions = max_positions
        self.num_segments = num_segments
        self.embedding_dim = embedding_dim
        self.share_layers = share_layers
        self.position_offset = position_offset
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.use_pooler = use_pooler
        self.initializer_range = initializer_range
        self.attention = attention
        self.attention_kwargs = attention_kwargs

    def __call__(self, inputs, *args, **kwargs):
        # The optional `global_attention_mask` input may be left out of the dict.
        if isinstance(inputs, dict) and "global_attention_mask" not in inputs:
            if "global_attention_mask" in self.input:
                inputs = {**inputs, "global_attention_mask": None}
        return super().__call__(inputs, *args, **kwargs)

    @property
    def token_embedding(self):
        """The `ReversibleEmbedding` token table, for tied output heads."""
        return self.embeddings.token_embedding

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "max_positions": self.max_positions,
            "num_segments": self.num_segments,
            "embedding_dim": self.embedding_dim,
            "share_layers": self.share_layers,
            "position_offset": self.position_offset,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "normalize_first": self.normalize_first,
            "use_pooler": self.use_pooler,
            "initializer_range": self.initializer_range,
            "attention": self.attention,
            "attention_kwargs": self.attention_kwargs,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)
