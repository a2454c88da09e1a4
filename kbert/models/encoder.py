import keras

from kbert.arguments import head_counts, one_of, probability
from kbert.input_checks import ids, mask
from kbert.layers.bigbird_attention import BigBirdAttention
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.longformer_attention import LongformerAttention
from kbert.layers.multi_head_attention import MultiHeadAttention, kernel_choices
from kbert.layers.pooler import Pooler
from kbert.layers.text_embedding import TextEmbedding
from kbert.layers.encoder_block import EncoderBlock
from kbert.models.backbone import Backbone
from kbert.models.backbone_internals import BackboneInternals, per_layer_head_masks

# Attention layers an `Encoder` can be built with, by name (sparse kernels
# are added here as they land); each takes `num_heads`, `key_dim`, `dropout`,
# `kernel_initializer`, `dtype`, `name` and the encoder's `attention_kwargs`,
# and says with `takes_global_attention_mask` whether it has global tokens.
ATTENTION_LAYERS = {
    "dense": MultiHeadAttention,
    "bigbird": BigBirdAttention,
    "longformer": LongformerAttention,
}


@keras.saving.register_keras_serializable(package="kbert")
class Encoder(Backbone):
    """The BERT-family encoder backbone: embeddings, N encoder blocks, pooler.

    A functional `Backbone` with dict inputs `token_ids`, `segment_ids`
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
            per-layer windows). An attention layer with global tokens
            (`takes_global_attention_mask`, `"longformer"`) adds the optional
            input `global_attention_mask` (0/1 `(batch, sequence)`) to the
            model; left out of the input dict, no token is global.
        heads_per_layer: the number of attention heads of each layer, a list
            of `num_layers` ints of at most `num_heads` (what
            `kbert.analysis.prune_heads` leaves); every head keeps the width
            `hidden_dim // num_heads`. None: `num_heads` in every layer.
        attention_implementation: every layer's attention kernel (`kbert.layers.MultiHeadAttention`).
        dropout_prng: every dropout's JAX generator, None for the process default (`kbert.layers.Dropout`).
        dtype: dtype policy, e.g. `"mixed_bfloat16"`.

    Left out (or None), `padding_mask` means nothing is padded: the layers
    then run directly with no attention mask, which keeps PyTorch's flash
    kernel eligible.

    Head mask: the input dict may carry a float `head_mask`, `(num_layers,
    num_heads)` or `(batch, num_layers, num_heads)` (or, with layers of
    different head counts, a list of one `(heads,)` or `(batch, heads)` mask
    per layer), multiplying each head's attention output as transformers'
    `head_mask` does. It is not one of the model's inputs: a call with it runs
    the layers directly (`run_layers`), and a call without it is the plain
    functional graph, fused attention kernel included.

    Example:
    >>> encoder = Encoder(vocabulary_size=100, num_layers=2, num_heads=2,
    ...                   hidden_dim=16, intermediate_dim=32, max_positions=64)
    >>> outputs = encoder({"token_ids": keras.ops.ones((1, 8), "int32"),
    ...                    "segment_ids": keras.ops.zeros((1, 8), "int32"),
    ...                    "padding_mask": keras.ops.ones((1, 8), "int32")})
    >>> tuple(outputs["sequence_output"].shape), tuple(outputs["pooled_output"].shape)
    ((1, 8, 16), (1, 16))
    """

    # What `kbert.input_checks` checks of the inputs.
    # What trains it (a backbone owns no loss).
    TRAINED_BY = "a kbert.pretraining pretrainer or a kbert.tasks task"
    INPUT_TABLE = {
        "token_ids": ids("vocabulary_size"),
        "segment_ids": ids("num_segments"),
        "padding_mask": mask(),
        "global_attention_mask": mask(),
    }

    def __init__(
        self,
        vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
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
        heads_per_layer=None,
        attention_implementation="auto",
        dropout_prng=None,
        dtype=None,
        **kwargs,
    ):
        # === Config === (read by the steps that create the layers)
        self.set_transformer_sizes(
            vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim
        )
        one_of("attention", attention, ATTENTION_LAYERS)
        self.max_positions = max_positions
        self.num_segments = num_segments
        self.embedding_dim = embedding_dim
        self.share_layers = share_layers
        self.position_offset = position_offset
        self.dropout = probability("dropout", dropout)
        self.attention_dropout = probability(
            "attention_dropout", dropout if attention_dropout is None else attention_dropout
        )
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.use_pooler = use_pooler
        self.initializer_range = initializer_range
        self.attention = attention
        self.attention_kwargs = _copy_attention_kwargs(attention_kwargs, num_layers)
        self.attention_implementation, self.dropout_prng = kernel_choices(attention_implementation, dropout_prng)
        self.heads_per_layer = _checked_heads_per_layer(
            heads_per_layer, num_layers, num_heads, share_layers
        )

        # === Layers ===
        self._create_embeddings(dtype)
        self._create_blocks(dtype)
        self._create_output_layers(dtype)

        # === Functional graph ===
        inputs = self._symbolic_inputs()
        super().__init__(inputs=inputs, outputs=self.run_layers(inputs), dtype=dtype, **kwargs)

    # --- Layers -----------------------------------------------------------------

    def _initializer(self):
        return keras.initializers.TruncatedNormal(stddev=self.initializer_range)

    def _create_embeddings(self, dtype):
        self.embeddings = TextEmbedding(
            vocabulary_size=self.vocabulary_size,
            hidden_dim=self.hidden_dim,
            max_positions=self.max_positions,
            num_segments=self.num_segments,
            embedding_dim=self.embedding_dim,
            position_offset=self.position_offset,
            dropout=self.dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
            dropout_prng=self.dropout_prng,
            dtype=dtype,
            name="embeddings",
        )

    @property
    def layer_num_heads(self):
        """The number of attention heads of each layer, a list."""
        return list(self.heads_per_layer or [self.num_heads] * self.num_layers)

    def _attention_layer(self, index, dtype):
        per_layer = isinstance(self.attention_kwargs, list)
        return ATTENTION_LAYERS[self.attention](
            num_heads=self.layer_num_heads[index],
            key_dim=self.hidden_dim // self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=self._initializer(),
            attention_implementation=self.attention_implementation,
            dropout_prng=self.dropout_prng,
            dtype=dtype,
            name="attention_layer",
            **(self.attention_kwargs[index] if per_layer else self.attention_kwargs),
        )

    def _block(self, index, dtype):
        return EncoderBlock(
            num_heads=self.layer_num_heads[index],
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            activation=self.activation,
            layer_norm_epsilon=self.layer_norm_epsilon,
            normalize_first=self.normalize_first,
            kernel_initializer=self._initializer(),
            attention_layer=self._attention_layer(index, dtype),
            attention_implementation=self.attention_implementation,
            dropout_prng=self.dropout_prng,
            dtype=dtype,
            name="shared_transformer_layer" if self.share_layers else f"transformer_layer_{index}",
        )

    def _create_blocks(self, dtype):
        if self.share_layers:
            self.transformer_layers = [self._block(0, dtype)] * self.num_layers
        else:
            self.transformer_layers = [self._block(i, dtype) for i in range(self.num_layers)]

    def _create_output_layers(self, dtype):
        """The final LayerNorm of pre-LN blocks and the pooler, each where configured."""
        self.final_layer_norm = None
        if self.normalize_first:
            self.final_layer_norm = LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=dtype, name="final_layer_norm"
            )
        self.pooler = None
        if self.use_pooler:
            self.pooler = Pooler(
                self.hidden_dim, kernel_initializer=self._initializer(), dtype=dtype, name="pooler"
            )

    # --- Functional graph -------------------------------------------------------

    @property
    def takes_global_attention_mask(self):
        """Whether the attention has global tokens, so the model takes a `global_attention_mask`."""
        return ATTENTION_LAYERS[self.attention].takes_global_attention_mask

    def _symbolic_inputs(self):
        def int_input(name, optional=False):
            return keras.Input(shape=(None,), dtype="int32", name=name, optional=optional)

        inputs = {"token_ids": int_input("token_ids")}
        if self.num_segments > 0:
            inputs["segment_ids"] = int_input("segment_ids")
        inputs["padding_mask"] = int_input("padding_mask", optional=True)
        if self.takes_global_attention_mask:
            inputs["global_attention_mask"] = int_input("global_attention_mask", optional=True)
        return inputs

    def run_layers(self, inputs, hidden_states=False, attention_probabilities=False, training=None):
        """The output dict of the layers on `inputs` (symbolic or real), with the internals asked for.

        `hidden_states` and `attention_probabilities` add those outputs (see
        `with_internals`); the encoder's own graph asks for neither. An
        entry `head_mask` of `inputs` scales each layer's heads (see the class).
        """
        inputs = self.fill_global_attention_mask(inputs)
        padding_mask = inputs.get("padding_mask")
        x = self.embeddings(
            inputs["token_ids"], segment_ids=inputs.get("segment_ids"), padding_mask=padding_mask,
            training=training,
        )
        global_attention_mask = inputs.get("global_attention_mask")
        head_masks = per_layer_head_masks(inputs.get("head_mask"), self.num_layers)
        states, probabilities = [x], []
        for block, head_mask in zip(self.transformer_layers, head_masks):
            x = block(
                x,
                padding_mask=padding_mask,
                global_attention_mask=global_attention_mask,
                return_attention_probabilities=attention_probabilities,
                head_mask=head_mask,
                training=training,
            )
            if attention_probabilities:
                x, layer_probabilities = x
                probabilities.append(layer_probabilities)
            states.append(x)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        pooled = self.pooler(x) if self.pooler is not None else x[:, 0, :]
        outputs = {"sequence_output": x, "pooled_output": pooled}
        if hidden_states:
            outputs["hidden_states"] = keras.ops.stack(states, axis=1)
        if attention_probabilities:
            outputs["attention_probabilities"] = keras.ops.stack(probabilities, axis=1)
        return outputs

    def with_internals(self, hidden_states=True, attention_probabilities=True):
        """This encoder's layers as a model that also returns what happens inside.

        See `kbert.models.BackboneInternals`; the encoder itself keeps its
        outputs and its fused attention kernel. Sparse attention (BigBird,
        Longformer) gives its probabilities as a dense map, 0 outside its
        pattern, for sequences of at most
        `kbert.layers.sparse_attention.DENSE_PROBABILITIES_MAX_LENGTH` tokens.
        """
        return BackboneInternals(self, hidden_states, attention_probabilities)

    # --- Calls ------------------------------------------------------------------

    UNPADDED_MASKS = ("padding_mask",)

    def bypasses_graph(self, inputs):
        """Whether a call runs the layers directly: with a `head_mask`, or nothing padded (see `Backbone`)."""
        head_mask = isinstance(inputs, dict) and inputs.get("head_mask") is not None
        return head_mask or super().bypasses_graph(inputs)

    def __call__(self, inputs, *args, **kwargs):
        return super().__call__(self.fill_global_attention_mask(inputs), *args, **kwargs)

    def call(self, inputs, training=None, mask=None, **kwargs):
        inputs = self.fill_global_attention_mask(inputs)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    def fill_global_attention_mask(self, inputs):
        """`inputs` with a left-out (or None) `global_attention_mask` filled: no token is global.

        Keras takes None for an optional input, but not a missing key
        (`Missing data for input`), and a symbolic call cannot take None
        either; there the mask is zeros, which gives the same outputs at the
        real positions.
        """
        if not self.takes_global_attention_mask or not isinstance(inputs, dict):
            return inputs
        if inputs.get("global_attention_mask") is not None:
            return inputs
        mask = None
        if keras.backend.is_keras_tensor(inputs.get("padding_mask")):
            mask = keras.ops.zeros_like(inputs["padding_mask"])
        return {**inputs, "global_attention_mask": mask}

    @property
    def token_embedding(self):
        """The `ReversibleEmbedding` token table, for tied output heads."""
        return self.embeddings.token_embedding


def _checked_heads_per_layer(heads_per_layer, num_layers, num_heads, share_layers):
    """`heads_per_layer` as a list of `num_layers` ints in `[1, num_heads]`, or None (checked)."""
    heads = head_counts("heads_per_layer", heads_per_layer, num_layers, num_heads)
    if heads and share_layers and len(set(heads)) > 1:
        raise ValueError(f"Shared layers have one head count; received heads_per_layer={heads}.")
    return heads


def _copy_attention_kwargs(attention_kwargs, num_layers):
    """A copy of `attention_kwargs`: one dict, or a list of one dict per layer (checked)."""
    if isinstance(attention_kwargs, (list, tuple)):
        if len(attention_kwargs) != num_layers:
            raise ValueError(
                f"attention_kwargs has {len(attention_kwargs)} per-layer entries "
                f"for num_layers={num_layers}."
            )
        return [dict(layer_kwargs) for layer_kwargs in attention_kwargs]
    return dict(attention_kwargs or {})
