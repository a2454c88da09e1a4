"""BART, the denoising encoder-decoder of Lewis et al. 2020."""

import keras

from kbert.arguments import positive_int, positive_number, probability
from kbert.layers.multi_head_attention import kernel_choices
from kbert.layers.dropout import Dropout
from kbert.layers.language_model_head import LanguageModelHead
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.position_embedding import PositionEmbedding
from kbert.layers.reversible_embedding import ReversibleEmbedding
from kbert.layers.cross_attention_decoder_block import CrossAttentionDecoderBlock
from kbert.layers.encoder_block import EncoderBlock
from kbert.models.backbone import Backbone
from kbert.models.t5 import (
    INPUT_NAMES,
    T5,
    cross_attention_caches,
    decode_with_caches,
    self_attention_caches,
)

# BART's special ids (RoBERTa's vocabulary): <s> 0, <pad> 1, </s> 2; the
# decoder starts from </s> (`decoder_start_token_id`, docs/algorithms.md §10).
PAD_ID = 1
END_ID = 2
DECODER_START_ID = 2
# Learned positions start at row 2 of the table (max_positions + 2 rows).
POSITION_OFFSET = 2


@keras.saving.register_keras_serializable(package="kbert")
class BART(Backbone):
    """The BART encoder-decoder backbone, up to its vocabulary logits (docs/algorithms.md §10).

    Post-LN blocks with biases, `1/√d` attention and exact GELU: the encoder
    is a stack of `EncoderBlock`s, the decoder of `CrossAttentionDecoderBlock`s
    switched to BART's form. Each stack embeds its tokens with the shared
    token table (times `√d` only with `scale_embedding`), adds its own learned
    positions read from row 2 on (offset 2), and normalizes the sum
    (`layernorm_embedding`). The logits are the decoder output times the
    shared table, plus `final_logits_bias` (the `bias` of `lm_head`, a
    trainable weight here, a buffer in transformers). The decoder starts from
    `</s>` (id 2); the pad id is 1.

    Inputs and outputs are `kbert.models.T5`'s (`encoder_token_ids`,
    `encoder_padding_mask`, `decoder_token_ids`, `decoder_padding_mask`;
    `encoder_sequence_output`, `decoder_sequence_output`, `logits`), and so is
    the generation interface, so `kbert.tasks.Seq2SeqLM` and
    `kbert.generation.Seq2SeqGenerator` drive it as they drive T5.

    Args:
        vocabulary_size: rows of the shared token table.
        num_layers: encoder blocks (and decoder blocks unless `num_decoder_layers`).
        num_heads: attention heads.
        hidden_dim: model width `d`.
        intermediate_dim: feed-forward width.
        num_decoder_layers: decoder blocks; defaults to `num_layers`.
        max_positions: longest sequence (the position tables have 2 more rows).
        activation: feed-forward activation (`"gelu"`, the exact erf form).
        dropout: dropout on the embeddings, residual branches, attention
            probabilities and inside the feed-forward network.
        layer_norm_epsilon: LayerNorm epsilon (1e-5).
        scale_embedding: multiply the token embeddings by `√d` (bart-base/large: no).
        initializer_range: standard deviation of the normal initialisation (0.02).
        attention_implementation: every layer's attention kernel (`kbert.layers.MultiHeadAttention`).
        dropout_prng: every dropout's JAX generator, None for the process default (`kbert.layers.Dropout`).
        dtype: dtype policy.

    Example:
    >>> import numpy as np
    >>> model = BART(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
    ...              intermediate_dim=16, max_positions=16)
    >>> source = {"encoder_token_ids": np.full((2, 5), 4, "int32"), "encoder_padding_mask": np.ones((2, 5), "int32")}
    >>> target = {"decoder_token_ids": np.full((2, 3), 4, "int32"), "decoder_padding_mask": np.ones((2, 3), "int32")}
    >>> tuple(model({**source, **target})["logits"].shape)
    (2, 3, 50)
    """

    # What trains it (a backbone owns no loss).
    TRAINED_BY = "kbert.tasks.Seq2SeqLM"
    INPUT_TABLE = T5.INPUT_TABLE

    def __init__(
        self,
        vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
        num_decoder_layers=None,
        max_positions=1024,
        activation="gelu",
        dropout=0.1,
        layer_norm_epsilon=1e-5,
        scale_embedding=False,
        initializer_range=0.02,
        attention_implementation="auto",
        dropout_prng=None,
        dtype=None,
        **kwargs,
    ):
        # === Config === (read by the steps that create the layers)
        self.set_transformer_sizes(
            vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim
        )
        self.attention_implementation, self.dropout_prng = kernel_choices(attention_implementation, dropout_prng)
        self.num_decoder_layers = positive_int(
            "num_decoder_layers", num_layers if num_decoder_layers is None else num_decoder_layers
        )
        self.max_positions = positive_int("max_positions", max_positions)
        self.activation = activation
        self.dropout = probability("dropout", dropout)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.scale_embedding = bool(scale_embedding)
        self.initializer_range = positive_number("initializer_range", initializer_range)
        self.pad_id = PAD_ID
        self.end_id = END_ID
        self.decoder_start_id = DECODER_START_ID

        # === Layers ===
        self.token_embedding = ReversibleEmbedding(
            vocabulary_size, hidden_dim, embeddings_initializer=self._initializer(),
            dtype=dtype, name="token_embedding",
        )
        self._create_embedding_tail("encoder", dtype)
        self._create_embedding_tail("decoder", dtype)
        self.encoder_layers = [self._encoder_block(i, dtype) for i in range(num_layers)]
        self.decoder_layers = [
            self._decoder_block(i, dtype) for i in range(self.num_decoder_layers)
        ]
        self.lm_head = LanguageModelHead(
            vocabulary_size, token_embedding=self.token_embedding, dtype=dtype, name="lm_head"
        )

        # === Functional graph ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name,
                                    optional=name in self.UNPADDED_MASKS) for name in INPUT_NAMES}
        super().__init__(inputs=inputs, outputs=self.run_layers(inputs), dtype=dtype, **kwargs)

    UNPADDED_MASKS = ("encoder_padding_mask", "decoder_padding_mask")

    # --- Layers -----------------------------------------------------------------

    def _initializer(self):
        return keras.initializers.RandomNormal(stddev=self.initializer_range)

    def _create_embedding_tail(self, stack, dtype):
        """A stack's position table, embedding LayerNorm and dropout, as `<stack>_...` attributes."""
        position_embedding = PositionEmbedding(
            self.max_positions + POSITION_OFFSET, initializer=self._initializer(),
            dtype=dtype, name=f"{stack}_position_embedding",
        )
        norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=dtype, name=f"{stack}_embedding_layer_norm"
        )
        setattr(self, f"{stack}_position_embedding", position_embedding)
        setattr(self, f"{stack}_embedding_layer_norm", norm)
        dropout = Dropout(self.dropout, dtype=dtype, dropout_prng=self.dropout_prng)
        setattr(self, f"{stack}_embedding_dropout", dropout)

    def _block_arguments(self, dtype):
        """What the encoder and decoder blocks share."""
        return dict(
            num_heads=self.num_heads, intermediate_dim=self.intermediate_dim, dropout=self.dropout,
            activation=self.activation, layer_norm_epsilon=self.layer_norm_epsilon,
            kernel_initializer=self._initializer(), dtype=dtype,
            attention_implementation=self.attention_implementation,
            dropout_prng=self.dropout_prng,
        )

    def _encoder_block(self, index, dtype):
        return EncoderBlock(**self._block_arguments(dtype), name=f"encoder_layer_{index}")

    def _decoder_block(self, index, dtype):
        """A `CrossAttentionDecoderBlock` in BART's form: post-LayerNorm, biases, `1/√d`."""
        return CrossAttentionDecoderBlock(
            **self._block_arguments(dtype),
            normalize_first=False, normalization="layer", use_bias=True, attention_scale=None,
            name=f"decoder_layer_{index}",
        )

    def run_layers(self, inputs, training=None):
        """The output dict of the layers on `inputs` (symbolic or real); a padding mask left out
        or None pads nothing (the decoder's self-attention then takes its causal rule as a flag)."""
        encoder_padding_mask = inputs.get("encoder_padding_mask")
        encoder_outputs = self._run_encoder(inputs["encoder_token_ids"], encoder_padding_mask, training)
        decoder_outputs = self._run_decoder(
            inputs["decoder_token_ids"], inputs.get("decoder_padding_mask"), encoder_outputs,
            encoder_padding_mask, training,
        )
        return {
            "encoder_sequence_output": encoder_outputs,
            "decoder_sequence_output": decoder_outputs,
            "logits": self.lm_head(decoder_outputs),
        }

    # --- The stacks -------------------------------------------------------------

    def _embed(self, stack, token_ids, training, offset=0):
        """`Dropout(LN(scale·E[ids] + P[offset + 2 + i]))` of `stack` ("encoder" or "decoder")."""
        x = self.token_embedding(token_ids, scale=self.hidden_dim**0.5 if self.scale_embedding else None)
        positions = getattr(self, f"{stack}_position_embedding")
        x = x + positions(x, offset=offset + POSITION_OFFSET)
        x = getattr(self, f"{stack}_embedding_layer_norm")(x)
        return getattr(self, f"{stack}_embedding_dropout")(x, training=training)

    def _run_encoder(self, token_ids, padding_mask, training):
        x = self._embed("encoder", token_ids, training)
        for block in self.encoder_layers:
            x = block(x, padding_mask=padding_mask, training=training)
        return x

    def _run_decoder(self, token_ids, padding_mask, encoder_outputs, encoder_padding_mask, training):
        x = self._embed("decoder", token_ids, training)
        for block in self.decoder_layers:
            x = block(
                x,
                encoder_outputs=encoder_outputs,
                padding_mask=padding_mask,
                encoder_padding_mask=encoder_padding_mask,
                training=training,
            )
        return x

    # --- Pieces for generation (see `kbert.models.T5`) --------------------------

    def encode(self, token_ids, padding_mask, training=False):
        """The encoder stack: `(batch, length, hidden_dim)`."""
        return self._run_encoder(token_ids, padding_mask, training)

    def decode(self, token_ids, padding_mask, encoder_outputs, encoder_padding_mask):
        """The decoder stack and head on whole sequences (no cache): logits `(batch, length, vocab)`."""
        return self.lm_head(
            self._run_decoder(token_ids, padding_mask, encoder_outputs, encoder_padding_mask, False)
        )

    def cross_attention_caches(self, encoder_outputs):
        """Each decoder block's projected encoder keys and values, computed once per input."""
        return cross_attention_caches(self.decoder_layers, encoder_outputs)

    def self_attention_caches(self, batch_size, max_length):
        """Empty self-attention caches `(batch, heads, 2, max_length, key_dim)`, one per decoder block."""
        return self_attention_caches(self.decoder_layers, batch_size, max_length, self.compute_dtype)

    def decode_step(self, token_ids, index, self_caches, cross_caches, encoder_padding_mask):
        """One incremental decoder step at position `index`; see `kbert.models.T5.decode_step`.

        Returns `(logits (batch, vocab), updated self_caches)`.
        """
        x = self._embed("decoder", token_ids, training=False, offset=index)
        x, updated = decode_with_caches(
            self.decoder_layers, x, index, self_caches, cross_caches, encoder_padding_mask
        )
        return self.lm_head(x)[:, 0, :], updated
