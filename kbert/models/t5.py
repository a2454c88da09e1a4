"""T5, the encoder-decoder of "Exploring the Limits of Transfer Learning" (Raffel et al. 2020)."""

import keras
import numpy as np
from keras import ops

from kbert.arguments import head_counts, positive_int, probability
from kbert.layers.multi_head_attention import kernel_choices
from kbert.input_checks import ids, mask
from kbert.backend.ops import causal_mask
from kbert.layers.attention_mask import fold_padding_mask
from kbert.layers.dropout import Dropout, apply_dropout
from kbert.layers.fused_dense import FusedDense
from kbert.layers.relative_position_bias import RelativePositionBias
from kbert.layers.reversible_embedding import ReversibleEmbedding
from kbert.layers.rms_normalization import RMSNormalization
from kbert.layers.t5_block import T5Block
from kbert.layers.cross_attention_decoder_block import CrossAttentionDecoderBlock
from kbert.models.backbone import Backbone
from kbert.models.backbone_internals import BackboneInternals, per_layer_head_masks

# T5's special ids (docs/algorithms.md §8): the decoder starts from the pad id.
PAD_ID = 0
END_ID = 1

INPUT_NAMES = (
    "encoder_token_ids",
    "encoder_padding_mask",
    "decoder_token_ids",
    "decoder_padding_mask",
)


@keras.saving.register_keras_serializable(package="kbert")
class T5(Backbone):
    """The T5 encoder-decoder backbone, up to its vocabulary logits (docs/algorithms.md §8).

    The encoder is a stack of `T5Block`s, the decoder a stack of
    `CrossAttentionDecoderBlock` blocks: pre-norm with RMS normalization, no biases,
    unscaled attention and a relative position bias computed once per stack
    and shared by its blocks. v1.0 (`t5_small` ...) uses a ReLU feed-forward
    network and ties the output projection to the token table, rescaling the
    decoder output by `d^-0.5`; v1.1 uses gated tanh-GELU and an untied
    `lm_head`. The decoder starts from the pad id 0 and ends with id 1.

    A functional `keras.Model` with dict inputs `encoder_token_ids`,
    `encoder_padding_mask`, `decoder_token_ids`, `decoder_padding_mask` and
    dict outputs `encoder_sequence_output`, `decoder_sequence_output` and the
    vocabulary `logits`. It owns no loss: `kbert.tasks.Seq2SeqLM` wraps it
    with the token cross-entropy and generates with it.
    `kbert.generation.Seq2SeqGenerator` decodes through `encode`, `decode`,
    `cross_attention_caches`, `self_attention_caches` and `decode_step`, from
    `decoder_start_id`.

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
        encoder_layer_heads: the heads of each encoder layer after
            `kbert.analysis.prune_heads`, as the columns of the encoder's
            relative position bias table they read: a list of `num_layers`
            index lists, which together use the columns `0..k-1` (the table
            is `(num_buckets, k)`). None: `num_heads` heads in every layer,
            reading columns `0..num_heads-1`.
        decoder_layer_heads: the same for the decoder's self-attention and
            its position bias.
        cross_attention_heads_per_layer: the cross-attention heads of each
            decoder layer (a list of counts); None: `num_heads` each.
        attention_implementation: every layer's attention kernel (`kbert.layers.MultiHeadAttention`).
        dropout_prng: every dropout's JAX generator, None for the process default (`kbert.layers.Dropout`).
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

    # What trains it (a backbone owns no loss).
    TRAINED_BY = "kbert.tasks.Seq2SeqLM"
    # What `kbert.input_checks` checks of the inputs.
    INPUT_TABLE = {
        "encoder_token_ids": ids("vocabulary_size", ("batch", "encoder_sequence")),
        "encoder_padding_mask": mask(("batch", "encoder_sequence")),
        "decoder_token_ids": ids("vocabulary_size", ("batch", "decoder_sequence")),
        "decoder_padding_mask": mask(("batch", "decoder_sequence")),
    }

    def __init__(
        self,
        vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
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
        encoder_layer_heads=None,
        decoder_layer_heads=None,
        cross_attention_heads_per_layer=None,
        attention_implementation="auto",
        dropout_prng=None,
        dtype=None,
        **kwargs,
    ):
        # === Config === (read by the steps that create the layers)
        self.set_transformer_sizes(
            vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, key_dim
        )
        self.key_dim = positive_int("key_dim", key_dim, optional=True)
        self.attention_implementation, self.dropout_prng = kernel_choices(attention_implementation, dropout_prng)
        self.num_decoder_layers = positive_int(
            "num_decoder_layers", num_layers if num_decoder_layers is None else num_decoder_layers
        )
        self.activation = activation
        self.use_gated_activation = use_gated_activation
        self.tie_embeddings = tie_embeddings
        self.dropout = probability("dropout", dropout)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.initializer_factor = initializer_factor
        self._set_pruned_heads(encoder_layer_heads, decoder_layer_heads,
                               cross_attention_heads_per_layer)
        self.pad_id = PAD_ID
        self.end_id = END_ID
        self.decoder_start_id = PAD_ID

        # === Layers ===
        self._create_embeddings(dtype)
        self._create_encoder(dtype)
        self._create_decoder(dtype)
        self._create_head(dtype)

        # === Functional graph ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in INPUT_NAMES}
        super().__init__(inputs=inputs, outputs=self.run_layers(inputs), dtype=dtype, **kwargs)

    def _set_pruned_heads(self, encoder_layer_heads, decoder_layer_heads,
                          cross_attention_heads_per_layer):
        """The per-layer heads that `kbert.analysis.prune_heads` leaves, checked."""
        self.encoder_layer_heads = _checked_layer_heads(
            "encoder_layer_heads", encoder_layer_heads, self.num_layers, self.num_heads
        )
        self.decoder_layer_heads = _checked_layer_heads(
            "decoder_layer_heads", decoder_layer_heads, self.num_decoder_layers, self.num_heads
        )
        self.cross_attention_heads_per_layer = head_counts(
            "cross_attention_heads_per_layer", cross_attention_heads_per_layer,
            self.num_decoder_layers, self.num_heads,
        )

    # --- Layers -----------------------------------------------------------------

    def _create_embeddings(self, dtype):
        self.token_embedding = ReversibleEmbedding(
            self.vocabulary_size,
            self.hidden_dim,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=self.initializer_factor),
            dtype=dtype,
            name="token_embedding",
        )
        self.embedding_dropout = Dropout(self.dropout, dtype=dtype, dropout_prng=self.dropout_prng)

    @property
    def head_dim(self):
        """The width of each attention head, `d_kv`."""
        return self.key_dim or self.hidden_dim // self.num_heads

    def layer_heads(self, stack):
        """Each layer's position-bias columns in `stack` (`"encoder"` or `"decoder"`), a list."""
        if stack == "encoder":
            heads, count = self.encoder_layer_heads, self.num_layers
        else:
            heads, count = self.decoder_layer_heads, self.num_decoder_layers
        return heads or [list(range(self.num_heads))] * count

    def _stack(self, prefix, block_class, bidirectional, dtype, **per_block):
        """A stack's shared relative position bias, its blocks, its final RMS norm and dropout.

        `per_block` holds lists of one block argument per block.
        """
        layer_heads = self.layer_heads(prefix)
        position_bias = RelativePositionBias(
            num_heads=1 + max(max(heads) for heads in layer_heads),
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
            bidirectional=bidirectional,
            embeddings_initializer=keras.initializers.RandomNormal(
                stddev=self.initializer_factor * self.hidden_dim**-0.5
            ),
            dtype=dtype,
            name=f"{prefix}_position_bias",
        )
        blocks = [
            block_class(
                num_heads=len(layer_heads[i]),
                intermediate_dim=self.intermediate_dim,
                key_dim=self.head_dim,
                dropout=self.dropout,
                activation=self.activation,
                use_gated_activation=self.use_gated_activation,
                layer_norm_epsilon=self.layer_norm_epsilon,
                initializer_factor=self.initializer_factor,
                attention_implementation=self.attention_implementation,
                dropout_prng=self.dropout_prng,
                dtype=dtype,
                name=f"{prefix}_layer_{i}",
                **{argument: values[i] for argument, values in per_block.items()},
            )
            for i in range(len(layer_heads))
        ]
        norm = RMSNormalization(
            self.layer_norm_epsilon, dtype=dtype, name=f"{prefix}_final_layer_norm"
        )
        return position_bias, blocks, norm, Dropout(self.dropout, dtype=dtype, dropout_prng=self.dropout_prng)

    def _create_encoder(self, dtype):
        (
            self.encoder_position_bias,
            self.encoder_layers,
            self.encoder_final_layer_norm,
            self.encoder_final_dropout,
        ) = self._stack("encoder", T5Block, bidirectional=True, dtype=dtype)

    def _create_decoder(self, dtype):
        (
            self.decoder_position_bias,
            self.decoder_layers,
            self.decoder_final_layer_norm,
            self.decoder_final_dropout,
        ) = self._stack(
            "decoder", CrossAttentionDecoderBlock, bidirectional=False, dtype=dtype,
            cross_attention_num_heads=(
                self.cross_attention_heads_per_layer or [self.num_heads] * self.num_decoder_layers
            ),
        )

    def _create_head(self, dtype):
        self.lm_head = None
        if not self.tie_embeddings:
            self.lm_head = FusedDense(
                self.vocabulary_size,
                use_bias=False,
                kernel_initializer=keras.initializers.RandomNormal(stddev=self.initializer_factor),
                dtype=dtype,
                name="lm_head",
            )

    def run_layers(self, inputs, hidden_states=False, attention_probabilities=False):
        """The output dict of the layers on `inputs` (symbolic or real), with the internals asked for.

        `hidden_states` adds `encoder_hidden_states` and `decoder_hidden_states`
        `(batch, num_layers + 1, length, hidden)`; `attention_probabilities`
        adds `encoder_attention_probabilities`, `decoder_attention_probabilities`
        and `cross_attention_probabilities` `(batch, num_layers, heads, length,
        key_length)`: what transformers' `output_hidden_states` and
        `output_attentions` give (see `with_internals`).

        Optional float entries `encoder_head_mask`, `decoder_head_mask` and
        `cross_attention_head_mask` of `inputs`, `(num_layers, num_heads)` or
        `(batch, num_layers, num_heads)`, scale each head's output in the
        encoder's self-attention, the decoder's and its cross-attention
        (transformers 4's `head_mask`, `decoder_head_mask`, `cross_attn_head_mask`).
        """
        encoder_padding_mask = inputs["encoder_padding_mask"]
        encoder_outputs, encoder_states, encoder_probabilities = self._run_encoder(
            inputs["encoder_token_ids"], encoder_padding_mask, None, attention_probabilities,
            per_layer_head_masks(inputs.get("encoder_head_mask"), self.num_layers, "encoder_head_mask"),
        )
        decoder_outputs, decoder_states, decoder_probabilities = self._run_decoder(
            inputs["decoder_token_ids"], inputs["decoder_padding_mask"], encoder_outputs,
            encoder_padding_mask, None, attention_probabilities,
            *(per_layer_head_masks(inputs.get(name), self.num_decoder_layers, name)
              for name in ("decoder_head_mask", "cross_attention_head_mask")),
        )
        outputs = {
            "encoder_sequence_output": encoder_outputs,
            "decoder_sequence_output": decoder_outputs,
            "logits": self._logits(decoder_outputs),
        }
        if hidden_states:
            outputs["encoder_hidden_states"] = ops.stack(encoder_states, axis=1)
            outputs["decoder_hidden_states"] = ops.stack(decoder_states, axis=1)
        if attention_probabilities:
            outputs["encoder_attention_probabilities"] = ops.stack(encoder_probabilities, axis=1)
            self_probabilities, cross_probabilities = zip(*decoder_probabilities)
            outputs["decoder_attention_probabilities"] = ops.stack(self_probabilities, axis=1)
            outputs["cross_attention_probabilities"] = ops.stack(cross_probabilities, axis=1)
        return outputs

    def with_internals(self, hidden_states=True, attention_probabilities=True):
        """This model's layers as a model that also returns what happens inside.

        See `kbert.models.BackboneInternals` and `run_layers`.
        """
        return BackboneInternals(self, hidden_states, attention_probabilities)

    # --- The stacks -------------------------------------------------------------

    def _embed(self, token_ids, training):
        return apply_dropout(self.embedding_dropout, self.token_embedding(token_ids), training)

    def _end_decoder(self, x, training):
        return apply_dropout(self.decoder_final_dropout, self.decoder_final_layer_norm(x), training)

    def _run_encoder(self, token_ids, padding_mask, training, probabilities=False, head_masks=None):
        """`(outputs, hidden states, attention probabilities if asked)` of the encoder stack.

        As in transformers, the hidden states are the embeddings and each
        block's output, the last one after the final norm and dropout.
        """
        x = self._embed(token_ids, training)
        bias = fold_padding_mask(self.encoder_position_bias(x), padding_mask)
        biases = self._layer_biases("encoder", bias)
        states, layer_probabilities = [x], []
        head_masks = head_masks or [None] * len(self.encoder_layers)
        for block, head_mask, bias in zip(self.encoder_layers, head_masks, biases):
            x = block(x, attention_bias=bias, training=training,
                      return_attention_probabilities=probabilities, head_mask=head_mask)
            if probabilities:
                x, block_probabilities = x
                layer_probabilities.append(block_probabilities)
            states.append(x)
        # Called as a layer even where it drops nothing: skipping this call changed the order
        # of the model's weights on PyTorch (and so of its checkpoints) against the other backends.
        x = self.encoder_final_dropout(self.encoder_final_layer_norm(x), training=training)
        return x, states[:-1] + [x], layer_probabilities

    def _run_decoder(self, token_ids, padding_mask, encoder_outputs, encoder_padding_mask,
                     training, probabilities=False, head_masks=None, cross_head_masks=None):
        """`(outputs, hidden states, [(self, cross) probabilities] if asked)` of the decoder stack."""
        x = self._embed(token_ids, training)
        biases = self._layer_biases("decoder", self.decoder_position_bias(x))
        states, layer_probabilities = [x], []
        none = [None] * len(self.decoder_layers)
        for block, head_mask, cross_head_mask, bias in zip(
            self.decoder_layers, head_masks or none, cross_head_masks or none, biases
        ):
            x = block(
                x,
                encoder_outputs=encoder_outputs,
                padding_mask=padding_mask,
                encoder_padding_mask=encoder_padding_mask,
                attention_bias=bias,
                training=training,
                return_attention_probabilities=probabilities,
                head_mask=head_mask,
                cross_attention_head_mask=cross_head_mask,
            )
            if probabilities:
                x, self_probabilities, cross_probabilities = x
                layer_probabilities.append((self_probabilities, cross_probabilities))
            states.append(x)
        x = self._end_decoder(x, training)
        return x, states[:-1] + [x], layer_probabilities

    def _layer_biases(self, stack, bias):
        """Each layer's columns of `stack`'s position `bias` `(1, columns, query, key)`.

        In an unpruned stack every layer reads all of them (the same tensor);
        a pruned layer reads those of its heads (transformers' T5 selects
        them the same way, by each layer's `pruned_heads`).
        """
        columns = bias.shape[1]
        return [bias if heads == list(range(columns)) else ops.take(bias, heads, axis=1)
                for heads in self.layer_heads(stack)]

    def _logits(self, sequence_output):
        if self.lm_head is not None:
            return self.lm_head(sequence_output)
        # v1.0 ties the output projection to the embeddings and rescales by d^-0.5
        # (inside the layer: a functional graph replays a Python factor as a tensor
        # made from host data at every call on PyTorch).
        return self.token_embedding(sequence_output, reverse=True, scale=self.hidden_dim**-0.5)

    # --- Pieces for generation ------------------------------------------------

    def encode(self, token_ids, padding_mask, training=False):
        """The encoder stack: `(batch, length, hidden_dim)`."""
        return self._run_encoder(token_ids, padding_mask, training)[0]

    def decode(self, token_ids, padding_mask, encoder_outputs, encoder_padding_mask):
        """The decoder stack and head on whole sequences (no cache): logits `(batch, length, vocab)`."""
        sequence_output = self._run_decoder(
            token_ids, padding_mask, encoder_outputs, encoder_padding_mask, training=False
        )[0]
        return self._logits(sequence_output)

    def cross_attention_caches(self, encoder_outputs):
        """Each decoder block's projected encoder keys and values, computed once per input."""
        return cross_attention_caches(self.decoder_layers, encoder_outputs)

    def self_attention_caches(self, batch_size, max_length):
        """Empty self-attention caches `(batch, heads, 2, max_length, key_dim)`, one per decoder block."""
        return self_attention_caches(self.decoder_layers, batch_size, max_length, self.compute_dtype)

    def decode_step(
        self,
        token_ids,
        index,
        self_caches,
        cross_caches,
        encoder_padding_mask,
    ):
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
        x = self._embed(token_ids, training=False)
        bias = self.decoder_position_bias(x, self_caches[0][:, 0, 0], query_offset=index)
        x, updated = decode_with_caches(
            self.decoder_layers, x, index, self_caches, cross_caches, encoder_padding_mask,
            attention_biases=self._layer_biases("decoder", bias),
        )
        sequence_output = self._end_decoder(x, training=False)
        return self._logits(sequence_output)[:, 0, :], updated


def cross_attention_caches(decoder_layers, encoder_outputs):
    """Each `CrossAttentionDecoderBlock` block's projected encoder keys and values."""
    return tuple(block.cross_attention.compute_cache(encoder_outputs) for block in decoder_layers)


def decode_with_caches(decoder_layers, x, index, self_caches, cross_caches, encoder_padding_mask,
                       attention_biases=None):
    """`x` `(batch, 1, width)` at position `index` through every `CrossAttentionDecoderBlock` and
    its caches: `(outputs, updated self-attention caches)`; `attention_biases`, if given,
    holds each block's self-attention score bias. The causal mask is built once for all blocks."""
    updated = []
    biases = attention_biases or [None] * len(decoder_layers)
    mask = causal_mask(1, ops.shape(self_caches[0])[3], index)
    for block, cache, cross, bias in zip(decoder_layers, self_caches, cross_caches, biases):
        x, cache = block(
            x,
            encoder_padding_mask=encoder_padding_mask,
            self_attention_cache=cache,
            cross_attention_cache=cross,
            cache_update_index=index,
            training=False,
            attention_bias=bias,
            self_attention_mask=mask,
        )
        updated.append(cache)
    return x, tuple(updated)


def self_attention_caches(decoder_layers, batch_size, max_length, dtype):
    """Empty self-attention caches `(batch, heads, 2, max_length, key_dim)`, one per block."""
    return tuple(
        ops.zeros((batch_size, block.self_attention.num_heads, 2, max_length,
                   block.self_attention.key_dim), dtype)
        for block in decoder_layers
    )


def _checked_layer_heads(name, layer_heads, num_layers, num_heads):
    """`layer_heads` (a T5 stack's position-bias columns per layer) as lists of ints, or None.

    Checked: `num_layers` non-empty lists of distinct columns in `[0, num_heads)`
    that together use `0..k-1`.

    >>> _checked_layer_heads("encoder_layer_heads", [[0, 2], [1]], 2, 3)
    [[0, 2], [1]]
    """
    if layer_heads is None:
        return None
    heads = [[int(head) for head in layer] for layer in layer_heads]
    used = sorted({head for layer in heads for head in layer})
    distinct = all(layer and len(set(layer)) == len(layer) for layer in heads)
    if len(heads) != num_layers or not distinct or used != list(range(len(used))) or len(used) > num_heads:
        raise ValueError(
            f"{name} must list, for each of the {num_layers} layers, distinct position-bias "
            f"columns that together are 0..k-1 with k <= num_heads={num_heads}; "
            f"received {layer_heads}."
        )
    return heads


def seq2seq_inputs(encoder_token_ids, target_ids, pad_id=PAD_ID, start_id=PAD_ID):
    """Teacher-forcing inputs for `kbert.tasks.Seq2SeqLM.fit(inputs, target_ids)`, from NumPy arrays.

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

