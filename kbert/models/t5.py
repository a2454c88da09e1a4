"""T5, the encoder-decoder of "Exploring the Limits of Transfer Learning" (Raffel et al. 2020)."""

import keras
import numpy as np
from keras import ops

from kbert.backend_utils import scale_loss_for_replicas
from kbert.layers.relative_position_bias import RelativePositionBias
from kbert.layers.reversible_embedding import ReversibleEmbedding
from kbert.layers.rms_normalization import RMSNormalization
from kbert.layers.transformer_decoder import TransformerDecoder

# T5's special ids (ALGORITHMS.md §3): the decoder starts from the pad id.
PAD_ID = 0
END_ID = 1


def _encode(parts, token_ids, padding_mask, training=None):
    x = parts.embedding_dropout(parts.token_embedding(token_ids), training=training)
    bias = parts.encoder_position_bias(x)
    for block in parts.encoder_layers:
        x = block(x, padding_mask=padding_mask, attention_bias=bias, training=training)
    x = parts.encoder_final_layer_norm(x)
    return parts.encoder_final_dropout(x, training=training)


def _decoder_stack(parts, token_ids, run_blocks, training=None):
    """Embeddings -> `run_blocks(x)` -> final norm and dropout."""
    x = parts.embedding_dropout(parts.token_embedding(token_ids), training=training)
    x, extra = run_blocks(x)
    x = parts.decoder_final_layer_norm(x)
    return parts.decoder_final_dropout(x, training=training), extra


def _logits(parts, sequence_output):
    if parts.lm_head is not None:
        return parts.lm_head(sequence_output)
    # v1.0 ties the output projection to the embeddings and rescales by d^-0.5.
    scaled = sequence_output * ops.cast(parts.hidden_dim**-0.5, sequence_output.dtype)
    return parts.token_embedding(scaled, reverse=True)


def _decode(parts, token_ids, padding_mask, encoder_outputs, encoder_padding_mask, training=None):
    def run_blocks(x):
        bias = parts.decoder_position_bias(x)
        for block in parts.decoder_layers:
            x = block(
                x,
                encoder_outputs=encoder_outputs,
                padding_mask=padding_mask,
                encoder_padding_mask=encoder_padding_mask,
                attention_bias=bias,
                training=training,
            )
        return x, None

    sequence_output, _ = _decoder_stack(parts, token_ids, run_blocks, training)
    return sequence_output


class _Parts:
    """The layers of a T5 while the functional graph is wired (before `Model.__init__`)."""

    def __init__(self, **layers):
        self.__dict__.update(layers)


@keras.saving.register_keras_serializable(package="kbert")
class T5(keras.Model):
    """The T5 encoder-decoder backbone with its language-model head (ALGORITHMS.md §3).

    Both stacks are `TransformerDecoder` blocks (the encoder's without
    cross-attention and not causal), pre-norm with RMS normalization, no biases,
    unscaled attention and a relative position bias computed once per stack
    and shared by its blocks. v1.0 (`t5_small` ...) uses a ReLU feed-forward
    network and ties the output projection to the token table, rescaling the
    decoder output by `d^-0.5`; v1.1 uses gated tanh-GELU and an untied
    `lm_head`. The decoder starts from the pad id 0 and ends with id 1.

    A functional `keras.Model` with dict inputs `encoder_token_ids`,
    `encoder_padding_mask`, `decoder_token_ids`, `decoder_padding_mask` and
    dict outputs `encoder_sequence_output`, `decoder_sequence_output` and the
    vocabulary `logits`. Trained with `fit(inputs, target_ids)` (teacher
    forcing: see `seq2seq_inputs`), the loss is the token cross-entropy over
    the non-pad targets (`compute_loss`). `kbert.generation.Seq2SeqGenerator`
    decodes with it, through `encode`, `decode`, `cross_attention_caches`,
    `self_attention_caches` and `decode_step`.

    Args:
        vocabulary_size: rows of the shared token table.
        num_layers: encoder blocks (and decoder blocks unless `num_decoder_layers`).
        num_heads: attention heads.
        hidden_dim: model width `d`.
        intermediate_dim: feed-forward width `d_ff`.
        key_dim: width of each head `d_kv`; defaults to `hidden_dim / num_heads`.
        num_decoder_layers: decoder blocks; defaults to `num_layers`.
        activation: feed-forward activation (v1.0 `"relu"`, v1.1 `"gelu_approximate"`).
        use_gated_activation: v1.1's gated feed-forward network.
        tie_embeddings: v1.0's tied, rescaled output projection (else an untied `lm_head`).
        dropout: dropout rate everywhere (T5: 0.1).
        layer_norm_epsilon: RMS normalization epsilon.
        num_buckets: relative position buckets (32).
        max_distance: relative position distance of the last bucket (128).
        initializer_factor: scale of T5's initialisation.
        dtype: dtype policy.

    Example:
    >>> model = T5(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
    ...            intermediate_dim=16)
    >>> ids, mask = keras.ops.ones((2, 5), "int32"), keras.ops.ones((2, 5), "int32")
    >>> outputs = model({"encoder_token_ids": ids, "encoder_padding_mask": mask,
    ...                  "decoder_token_ids": ids[:, :3], "decoder_padding_mask": mask[:, :3]})
    >>> tuple(outputs["logits"].shape)
    (2, 3, 50)
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        key_dim=None,
        num_decoder_layers=None,
        activation="relu",
        use_gated_activation=False,
        tie_embeddings=True,
        dropout=0.1,
        layer_norm_epsilon=1e-6,
        num_buckets=32,
        max_distance=128,
        initializer_factor=1.0,
        dtype=None,
        **kwargs,
    ):
        if key_dim is None and hidden_dim % num_heads:
            raise ValueError(
                f"hidden_dim={hidden_dim} is not divisible by num_heads={num_heads}; pass key_dim."
            )
        num_decoder_layers = num_layers if num_decoder_layers is None else num_decoder_layers

        def blocks(count, prefix, decoder):
            return [
                TransformerDecoder(
                    num_heads=num_heads,
                    intermediate_dim=intermediate_dim,
                    key_dim=key_dim,
                    dropout=dropout,
                    activation=activation,
                    use_gated_activation=use_gated_activation,
                    layer_norm_epsilon=layer_norm_epsilon,
                    use_cross_attention=decoder,
                    causal=decoder,
                    initializer_factor=initializer_factor,
                    dtype=dtype,
                    name=f"{prefix}_layer_{i}",
                )
                for i in range(count)
            ]

        def position_bias(name, bidirectional):
            return RelativePositionBias(
                num_heads=num_heads,
                num_buckets=num_buckets,
                max_distance=max_distance,
                bidirectional=bidirectional,
                embeddings_initializer=keras.initializers.RandomNormal(
                    stddev=initializer_factor * hidden_dim**-0.5
                ),
                dtype=dtype,
                name=name,
            )

        def norm(name):
            return RMSNormalization(layer_norm_epsilon, dtype=dtype, name=name)

        def drop():
            return keras.layers.Dropout(dropout, dtype=dtype)

        # === Layers === (attributes are set after `super().__init__`, which
        # PyTorch modules require)
        parts = _Parts(
            hidden_dim=hidden_dim,
            token_embedding=ReversibleEmbedding(
                vocabulary_size,
                hidden_dim,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=initializer_factor),
                dtype=dtype,
                name="token_embedding",
            ),
            embedding_dropout=drop(),
            encoder_position_bias=position_bias("encoder_position_bias", True),
            encoder_layers=blocks(num_layers, "encoder", decoder=False),
            encoder_final_layer_norm=norm("encoder_final_layer_norm"),
            encoder_final_dropout=drop(),
            decoder_position_bias=position_bias("decoder_position_bias", False),
            decoder_layers=blocks(num_decoder_layers, "decoder", decoder=True),
            decoder_final_layer_norm=norm("decoder_final_layer_norm"),
            decoder_final_dropout=drop(),
            lm_head=None
            if tie_embeddings
            else keras.layers.Dense(
                vocabulary_size,
                use_bias=False,
                kernel_initializer=keras.initializers.RandomNormal(stddev=initializer_factor),
                dtype=dtype,
                name="lm_head",
            ),
        )

        # === Functional graph ===
        names = (
            "encoder_token_ids",
            "encoder_padding_mask",
            "decoder_token_ids",
            "decoder_padding_mask",
        )
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in names}
        encoder_outputs = _encode(parts, inputs["encoder_token_ids"], inputs["encoder_padding_mask"])
        decoder_outputs = _decode(
            parts,
            inputs["decoder_token_ids"],
            inputs["decoder_padding_mask"],
            encoder_outputs,
            inputs["encoder_padding_mask"],
        )
        outputs = {
            "encoder_sequence_output": encoder_outputs,
            "decoder_sequence_output": decoder_outputs,
            "logits": _logits(parts, decoder_outputs),
        }
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        # Functional models drop `dtype`; keep it so `dtype_policy` and the config carry it.
        self.dtype_policy = dtype
        for name, value in vars(parts).items():
            setattr(self, name, value)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.intermediate_dim = intermediate_dim
        self.num_decoder_layers = num_decoder_layers
        self.activation = activation
        self.use_gated_activation = use_gated_activation
        self.tie_embeddings = tie_embeddings
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.initializer_factor = initializer_factor
        self.pad_id = PAD_ID
        self.end_id = END_ID

    # --- Pieces for generation ------------------------------------------------

    def encode(self, token_ids, padding_mask, training=False):
        """The encoder stack: `(batch, length, hidden_dim)`."""
        return _encode(self, token_ids, padding_mask, training)

    def decode(self, token_ids, padding_mask, encoder_outputs, encoder_padding_mask):
        """The decoder stack and head on whole sequences (no cache): logits `(batch, length, vocab)`."""
        sequence_output = _decode(
            self, token_ids, padding_mask, encoder_outputs, encoder_padding_mask, training=False
        )
        return _logits(self, sequence_output)

    def cross_attention_caches(self, encoder_outputs):
        """Each decoder block's projected encoder keys and values, computed once per input."""
        return tuple(
            block.cross_attention.compute_cache(encoder_outputs) for block in self.decoder_layers
        )

    def self_attention_caches(self, batch_size, max_length):
        """Empty self-attention caches `(batch, heads, 2, max_length, key_dim)`, one per decoder block."""
        attention = self.decoder_layers[0].self_attention
        shape = (batch_size, attention.num_heads, 2, max_length, attention.key_dim)
        return tuple(ops.zeros(shape, self.compute_dtype) for _ in self.decoder_layers)

    def decode_step(self, token_ids, index, self_caches, cross_caches, encoder_padding_mask):
        """One incremental decoder step at position `index`.

        Args:
            token_ids: `(batch, 1)`, the token at position `index`.
            index: scalar int, its position.
            self_caches: from `self_attention_caches` (or the previous step).
            cross_caches: from `cross_attention_caches`.
            encoder_padding_mask: `(batch, encoder_length)`.

        Returns:
            `(logits (batch, vocab), updated self_caches)`.
        """

        def run_blocks(x):
            bias = self.decoder_position_bias(x, self_caches[0][:, 0, 0], query_offset=index)
            updated = []
            for block, cache, cross in zip(self.decoder_layers, self_caches, cross_caches):
                x, cache = block(
                    x,
                    encoder_padding_mask=encoder_padding_mask,
                    attention_bias=bias,
                    self_attention_cache=cache,
                    cross_attention_cache=cross,
                    cache_update_index=index,
                    training=False,
                )
                updated.append(cache)
            return x, tuple(updated)

        sequence_output, updated = _decoder_stack(self, token_ids, run_blocks, training=False)
        return _logits(self, sequence_output)[:, 0, :], updated

    # --- Training -------------------------------------------------------------

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean token cross-entropy of `logits` against target ids `y`, pad targets ignored."""
        if y is None:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        logits = ops.cast(y_pred["logits"], "float32")
        losses = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        weights = ops.cast(ops.not_equal(y, self.pad_id), "float32")
        if sample_weight is not None:
            weights = weights * ops.cast(ops.reshape(sample_weight, (-1, 1)), "float32")
        loss = ops.sum(losses * weights) / ops.maximum(ops.sum(weights), 1.0)
        return scale_loss_for_replicas(loss)

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
            "key_dim": self.key_dim,
            "num_decoder_layers": self.num_decoder_layers,
            "activation": self.activation,
            "use_gated_activation": self.use_gated_activation,
            "tie_embeddings": self.tie_embeddings,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "initializer_factor": self.initializer_factor,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)


def seq2seq_inputs(encoder_token_ids, target_ids, pad_id=PAD_ID, start_id=PAD_ID):
    """Teacher-forcing inputs for `T5.fit(inputs, target_ids)`, from NumPy arrays.

    The decoder reads the targets shifted right behind `start_id`; padding
    masks mark the non-pad ids (a decoder position is real where its target is).

    >>> inputs = seq2seq_inputs(np.array([[5, 6, 1]]), np.array([[7, 1, 0]]))
    >>> inputs["decoder_token_ids"].tolist(), inputs["decoder_padding_mask"].tolist()
    ([[0, 7, 1]], [[1, 1, 0]])
    """
    encoder_token_ids = np.asarray(encoder_token_ids, "int32")
    target_ids = np.asarray(target_ids, "int32")
    if encoder_token_ids.ndim != 2 or target_ids.ndim != 2:
        raise ValueError(
            "seq2seq_inputs expects (batch, length) arrays; received shapes "
            f"{encoder_token_ids.shape} and {target_ids.shape}."
        )
    decoder_token_ids = np.concatenate(
        [np.full_like(target_ids[:, :1], start_id), target_ids[:, :-1]], axis=1
    )
    return {
        "encoder_token_ids": encoder_token_ids,
        "encoder_padding_mask": (encoder_token_ids != pad_id).astype("int32"),
        "decoder_token_ids": decoder_token_ids,
        "decoder_padding_mask": (target_ids != pad_id).astype("int32"),
    }
