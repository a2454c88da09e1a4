"""GPT-2, the decoder-only language model of "Language Models are Unsupervised Multitask Learners"."""

import keras
from keras import ops

from kbert.arguments import positive_int, probability
from kbert.layers.multi_head_attention import kernel_choices
from kbert.backend.ops import take_indices
from kbert.input_checks import ids, mask
from kbert.layers.attention_mask import causal_padding_mask
from kbert.layers.dropout import Dropout, apply_dropout
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.position_embedding import PositionEmbedding
from kbert.layers.reversible_embedding import ReversibleEmbedding
from kbert.layers.causal_decoder_block import CausalDecoderBlock
from kbert.models.backbone import Backbone

# GPT-2's `<|endoftext|>` (the last id of its 50257 tokens) ends, starts and pads text.
END_ID = 50256


def position_ids(padding_mask):
    """Per-row positions `cumsum(mask) - 1` of a (left-)padded batch; 0 at padding.

    >>> ops.convert_to_numpy(position_ids(ops.convert_to_tensor([[0, 0, 1, 1]]))).tolist()
    [[0, 0, 0, 1]]
    """
    # `ones_like` and `zeros_like`, not 1 and 0: a functional graph replays a
    # Python number as a tensor made from host data at every call on PyTorch.
    mask = ops.cast(padding_mask, "int32")
    positions = ops.cumsum(mask, axis=1) - ops.ones_like(mask)
    return ops.maximum(positions, ops.zeros_like(positions))


@keras.saving.register_keras_serializable(package="kbert")
class GPT2(Backbone):
    """The GPT-2 decoder, up to its vocabulary logits (docs/algorithms.md §11).

    Token and learned position embeddings, a stack of pre-LN
    `CausalDecoderBlock`s (`x + attn(ln_1(x))`, then
    `x + mlp(ln_2(x))`, tanh GELU, biases everywhere, scores scaled by
    `1/sqrt(d)`), a final LayerNorm `ln_f` and an LM head tied to the token
    table. Positions come from the padding mask (`cumsum(mask) - 1` per row),
    so a left-padded batch gives each row the outputs of its unpadded text.
    Weights are drawn from N(0, 0.02), the residual output projections from
    N(0, 0.02 / sqrt(2 * num_layers)).

    A functional `keras.Model` with dict inputs `token_ids` and
    `padding_mask` `(batch, length)` (left out or None: nothing is padded, and
    attention takes the causal rule as a flag to the fused kernel) and dict outputs `sequence_output` (after
    `ln_f`) and `logits` `(batch, length, vocabulary_size)`. It owns no loss:
    `kbert.tasks.CausalLM` trains it and generates with it through
    `kbert.generation.CausalLMGenerator`, which uses `attention_caches`,
    `call_with_cache` and `decode`.

    Args:
        vocabulary_size: rows of the token table (GPT-2: 50257).
        num_layers: decoder blocks.
        num_heads: attention heads.
        hidden_dim: model width.
        intermediate_dim: feed-forward width (GPT-2: 4 * hidden_dim).
        max_positions: rows of the position table (GPT-2: 1024).
        dropout: dropout on the embeddings, residual branches and attention
            probabilities (GPT-2: 0.1).
        layer_norm_epsilon: LayerNorm epsilon (1e-5).
        end_id: the end-of-text id generation stops at (also the pad id).
        attention_implementation: every layer's attention kernel (`kbert.layers.MultiHeadAttention`).
        dropout_prng: every dropout's JAX generator, None for the process default (`kbert.layers.Dropout`).
        dtype: dtype policy.

    Example:
    >>> model = GPT2(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
    ...              intermediate_dim=16, max_positions=16, end_id=0)
    >>> outputs = model({"token_ids": keras.ops.ones((2, 5), "int32"),
    ...                  "padding_mask": keras.ops.ones((2, 5), "int32")})
    >>> tuple(outputs["logits"].shape), tuple(outputs["sequence_output"].shape)
    ((2, 5, 50), (2, 5, 8))
    """

    # What trains it (a backbone owns no loss).
    TRAINED_BY = "kbert.tasks.CausalLM"
    INPUT_TABLE = {
        "token_ids": ids("vocabulary_size", ("batch", "sequence")),
        "padding_mask": mask(("batch", "sequence")),
    }

    def __init__(
        self,
        vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
        max_positions=1024,
        dropout=0.1,
        layer_norm_epsilon=1e-5,
        end_id=END_ID,
        attention_implementation="auto",
        dropout_prng=None,
        dtype=None,
        **kwargs,
    ):
        self.set_transformer_sizes(
            vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim
        )
        self.max_positions = positive_int("max_positions", max_positions)
        self.dropout = probability("dropout", dropout)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.attention_implementation, self.dropout_prng = kernel_choices(attention_implementation, dropout_prng)
        if not 0 <= end_id < vocabulary_size:
            raise ValueError(f"end_id must be in [0, {vocabulary_size}); received {end_id}.")
        self.end_id = int(end_id)
        self.pad_id = self.end_id
        self._create_layers(dtype)
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name, optional=optional)
            for name, optional in (("token_ids", False), ("padding_mask", True))
        }
        super().__init__(inputs=inputs, outputs=self.run_layers(inputs), dtype=dtype, **kwargs)

    UNPADDED_MASKS = ("padding_mask",)

    def run_layers(self, inputs, training=None):
        """The output dict on `inputs` (symbolic or real); a `padding_mask` left out or None pads nothing."""
        return self._forward(inputs["token_ids"], inputs.get("padding_mask"), training)

    # --- Layers -----------------------------------------------------------------

    def _create_layers(self, dtype):
        normal = keras.initializers.RandomNormal(stddev=0.02)
        residual = keras.initializers.RandomNormal(stddev=0.02 / (2 * self.num_layers) ** 0.5)
        self.token_embedding = ReversibleEmbedding(
            self.vocabulary_size, self.hidden_dim, embeddings_initializer=normal, dtype=dtype,
            name="token_embedding",
        )
        self.position_embedding = PositionEmbedding(
            self.max_positions, initializer=normal, dtype=dtype, name="position_embedding"
        )
        self.embedding_dropout = Dropout(self.dropout, dtype=dtype, dropout_prng=self.dropout_prng)
        self.transformer_layers = [
            CausalDecoderBlock(
                num_heads=self.num_heads,
                intermediate_dim=self.intermediate_dim,
                dropout=self.dropout,
                activation="gelu_approximate",
                layer_norm_epsilon=self.layer_norm_epsilon,
                kernel_initializer=normal,
                output_kernel_initializer=residual,
                attention_implementation=self.attention_implementation,
                dropout_prng=self.dropout_prng,
                dtype=dtype,
                name=f"transformer_layer_{index}",
            )
            for index in range(self.num_layers)
        ]
        self.final_layer_norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=dtype, name="final_layer_norm"
        )

    # --- Forward ----------------------------------------------------------------

    def _embed(self, token_ids, positions, training):
        x = self.token_embedding(token_ids)
        x = x + self.position_embedding(x, positions=positions)
        return apply_dropout(self.embedding_dropout, x, training)

    def _head(self, x):
        sequence_output = self.final_layer_norm(x)
        return sequence_output, self.token_embedding(sequence_output, reverse=True)

    def _forward(self, token_ids, padding_mask, training=None):
        """The output dict on whole sequences (no cache); a `padding_mask` of None pads nothing."""
        unpadded = padding_mask is None
        x = self._embed(token_ids, None if unpadded else position_ids(padding_mask), training)
        # Nothing padded: the blocks' own causal rule, a flag to the fused kernel.
        attention_mask = None if unpadded else causal_padding_mask(padding_mask)
        for block in self.transformer_layers:
            x = block(x, attention_mask=attention_mask, training=training)
        sequence_output, logits = self._head(x)
        return {"sequence_output": sequence_output, "logits": logits}

    # --- Pieces for generation ------------------------------------------------

    def decode(self, token_ids, padding_mask):
        """Logits `(batch, length, vocab)` on whole sequences, no cache and no input checks."""
        return self._forward(token_ids, padding_mask, training=False)["logits"]

    def attention_caches(self, batch_size, max_length):
        """Empty key/value caches `(batch, heads, 2, max_length, key_dim)`, one per block."""
        shape = (batch_size, self.num_heads, 2, max_length, self.hidden_dim // self.num_heads)
        return tuple(ops.zeros(shape, self.compute_dtype) for _ in self.transformer_layers)

    def call_with_cache(self, token_ids, padding_mask, caches, index, logits=True):
        """The tokens at positions `index ..` of a sequence against key/value caches.

        Args:
            token_ids: `(batch, length)`, the tokens at buffer positions
                `index .. index + length - 1`.
            padding_mask: `(batch, max_length)` over the whole buffer the
                caches cover (future positions may be anything), or None
                when nothing is padded.
            caches: from `attention_caches` (or the previous call).
            index: scalar int, the buffer position of the first token.
            logits: False fills the caches only (a prompt before decoding),
                without the output head: for a 64-token prompt to GPT-2 124M
                that head is a third of the work.

        Returns:
            `(logits (batch, length, vocab), updated caches)`; `(None, updated
            caches)` with `logits=False`.
        """
        length = ops.shape(token_ids)[1]
        # A gather rather than `ops.slice`, which costs 75 µs a call on eager PyTorch.
        columns = ops.arange(length, dtype="int32") + ops.cast(index, "int32")
        if padding_mask is None:  # nothing padded: the blocks' causal rule (a flag at index 0)
            positions, attention_mask = columns[None, :], None
        else:
            positions = take_indices(position_ids(padding_mask), columns, axis=1)
            attention_mask = causal_padding_mask(padding_mask, length, offset=index)
        x = self._embed(token_ids, positions, training=False)
        updated = []
        for block, cache in zip(self.transformer_layers, caches):
            x, cache = block(
                x, attention_mask=attention_mask, cache=cache, cache_update_index=index, training=False,
            )
            updated.append(cache)
        return (self._head(x)[1] if logits else None), tuple(updated)
