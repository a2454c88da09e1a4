"""XLNet, the permutation language model of "XLNet: Generalized Autoregressive Pretraining"."""

import keras
import numpy as np
from keras import ops

from kbert.arguments import positive_int, probability
from kbert.backend.ops import is_eager_tensor
from kbert.input_checks import check_inputs, ids, mask
from kbert.layers.dropout import Dropout, apply_dropout, checked_dropout_prng
from kbert.layers.reversible_embedding import ReversibleEmbedding
from kbert.layers.two_stream_encoder_block import TwoStreamEncoderBlock
from kbert.models.backbone import Backbone

# The inputs beside the tokens that switch the query stream or the memory on.
EXTRA_INPUTS = ("permutation_mask", "target_mapping", "memory")
# XLNet's tokenizer writes segment ids 0 and 1, 2 for <cls> and 3 for padding;
# the model only compares them, so any id below this bound is taken.
NUM_SEGMENT_IDS = 4


@keras.saving.register_keras_serializable(package="kbert")
class QueryEmbedding(keras.layers.Layer):
    """XLNet's `mask_emb`: the one learned vector every query-stream row starts from.

    Called on a target mapping `(batch, predictions, sequence)`, it returns
    `(batch, predictions, hidden_dim)`.

    >>> tuple(QueryEmbedding(8)(keras.ops.zeros((2, 3, 5))).shape)
    (2, 3, 8)
    """

    def __init__(self, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = positive_int("hidden_dim", hidden_dim)

    def build(self, input_shape=None):
        normal = keras.initializers.RandomNormal(stddev=0.02)
        self.embeddings = self.add_weight((1, 1, self.hidden_dim), normal, name="embeddings")
        self.built = True

    def call(self, target_mapping):
        shape = ops.shape(target_mapping)
        return ops.broadcast_to(self.embeddings, (shape[0], shape[1], self.hidden_dim))

    def get_config(self):
        return {**super().get_config(), "hidden_dim": self.hidden_dim}


@keras.saving.register_keras_serializable(package="kbert")
class XLNet(Backbone):
    """The XLNet encoder: token embeddings, then `TwoStreamEncoderBlock`s (post-LN, GELU).

    No absolute positions: each block adds Transformer-XL relative position
    and segment terms to its scores. The content stream `h` starts from the
    token embeddings; the query stream `g`, when a `target_mapping` is given,
    starts from one learned vector (`mask_emb`) at each predicted position,
    so it knows where it predicts but not what. Weights are drawn from
    N(0, 0.02).

    A functional `keras.Model` with dict inputs `token_ids`, `segment_ids`
    and `padding_mask` `(batch, sequence)` and dict outputs
    `sequence_output` (the content stream's last layer) and `pooled_output`
    (its last token: XLNet puts `<cls>` last and pads on the left). Called
    with any of these optional inputs, it runs its layers on them:

    - `permutation_mask` `(batch, sequence, sequence)`: 1 where position `i`
      may NOT attend position `j` (transformers' `perm_mask`);
    - `target_mapping` `(batch, predictions, sequence)`, one-hot rows: adds
      `query_output` `(batch, predictions, hidden)`, the query stream;
    - `memory` `(batch, num_layers, memory_length, hidden)`: the previous
      segment's input to each layer (Transformer-XL recurrence), and adds
      `memory`, the new one: the last `memory_length` (constructor) of the
      previous memory and this segment's layer inputs, or all of them with
      `memory_length=None`. A model built with `memory_length` returns
      `memory` from every call, the first segment's included.

    Args:
        vocabulary_size: rows of the token table (XLNet: 32000).
        num_layers: blocks.
        num_heads: attention heads.
        hidden_dim: model width.
        intermediate_dim: feed-forward width.
        dropout: dropout everywhere (XLNet: 0.1).
        activation: feed-forward activation ("gelu").
        layer_norm_epsilon: LayerNorm epsilon (1e-12).
        clamp_length: clamp relative distances, -1 for none.
        memory_length: the memory kept for the next segment (transformers'
            `mem_len`), or None.
        dropout_prng: every dropout's JAX generator, None for the process default (`kbert.layers.Dropout`).
        dtype: dtype policy.

    Example:
    >>> model = XLNet(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
    ...               intermediate_dim=16)
    >>> x = {"token_ids": keras.ops.ones((2, 5), "int32"),
    ...      "segment_ids": keras.ops.zeros((2, 5), "int32"),
    ...      "padding_mask": keras.ops.ones((2, 5), "int32")}
    >>> tuple(model(x)["sequence_output"].shape)
    (2, 5, 8)
    >>> mapping = keras.ops.one_hot(keras.ops.convert_to_tensor([[4], [3]]), 5)
    >>> tuple(model({**x, "target_mapping": mapping})["query_output"].shape)
    (2, 1, 8)

    References:
        - [Yang et al., 2019](https://arxiv.org/abs/1906.08237)
    """

    # The token task heads summarise a sequence by (`kbert.tasks.TextClassifier`).
    summary_token_index = -1
    # The standard deviation of every weight's normal draw (the task heads' too).
    initializer_range = 0.02

    INPUT_TABLE = {
        "token_ids": ids("vocabulary_size"),
        "segment_ids": ids(NUM_SEGMENT_IDS),
        "padding_mask": mask(),
    }

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, activation="gelu", layer_norm_epsilon=1e-12, clamp_length=-1,
                 memory_length=None, dropout_prng=None, dtype=None, **kwargs):
        self.vocabulary_size = positive_int("vocabulary_size", vocabulary_size)
        self.num_layers = positive_int("num_layers", num_layers)
        self.num_heads = positive_int("num_heads", num_heads)
        self.hidden_dim = positive_int("hidden_dim", hidden_dim)
        self.intermediate_dim = positive_int("intermediate_dim", intermediate_dim)
        self.dropout = probability("dropout", dropout)
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.clamp_length = clamp_length
        self.memory_length = positive_int("memory_length", memory_length, optional=True)
        self.dropout_prng = checked_dropout_prng(dropout_prng)
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim={hidden_dim} is not divisible by num_heads={num_heads}.")
        self._create_layers(dtype)
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask")
        }
        outputs = self._forward(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        # Outside the functional graph (it serves the query stream only): tracked explicitly,
        # which `Backbone.__setattr__` skips on PyTorch, so its weight is the model's.
        keras.Model.__setattr__(self, "query_embedding", self.query_embedding)

    def _create_layers(self, dtype):
        normal = keras.initializers.RandomNormal(stddev=self.initializer_range)
        self.token_embedding = ReversibleEmbedding(
            self.vocabulary_size, self.hidden_dim, embeddings_initializer=normal, dtype=dtype,
            name="token_embedding",
        )
        self.query_embedding = QueryEmbedding(self.hidden_dim, dtype=dtype, name="query_embedding")
        self.query_embedding.build()
        self.dropout_layer = Dropout(self.dropout, dtype=dtype, dropout_prng=self.dropout_prng)
        self.transformer_layers = [
            TwoStreamEncoderBlock(
                self.num_heads, self.intermediate_dim, self.dropout, self.activation,
                self.layer_norm_epsilon, self.clamp_length, dropout_prng=self.dropout_prng, dtype=dtype,
                name=f"transformer_layer_{index}",
            )
            for index in range(self.num_layers)
        ]

    # --- Forward ----------------------------------------------------------------

    def _next_memory(self, x, memory):
        """The memory this layer's input leaves for the next segment (no gradient flows back)."""
        x = x if memory is None else ops.concatenate([memory, x], axis=1)
        if self.memory_length is not None:
            x = x[:, -self.memory_length :]
        return ops.stop_gradient(x)

    def _forward(self, inputs, training=None):
        """The output dict of the layers on `inputs` (the optional ones may be absent)."""
        mapping, memory = inputs.get("target_mapping"), inputs.get("memory")
        remember = memory is not None or self.memory_length is not None
        x = apply_dropout(self.dropout_layer, self.token_embedding(inputs["token_ids"]), training)
        g = None
        if mapping is not None:
            g = apply_dropout(self.dropout_layer, self.query_embedding(mapping), training)
        memories = [None if memory is None else memory[:, i] for i in range(self.num_layers)]
        new_memory = []
        for block, layer_memory in zip(self.transformer_layers, memories):
            if remember:
                new_memory.append(self._next_memory(x, layer_memory))
            out = block(
                x, inputs["segment_ids"], inputs["padding_mask"], query=g,
                permutation_mask=inputs.get("permutation_mask"), target_mapping=mapping,
                memory=layer_memory, training=training,
            )
            x, g = out if g is not None else (out, None)
        x = apply_dropout(self.dropout_layer, x, training)
        outputs = {"sequence_output": x, "pooled_output": x[:, -1, :]}
        if g is not None:
            outputs["query_output"] = apply_dropout(self.dropout_layer, g, training)
        if remember:
            outputs["memory"] = ops.stack(new_memory, axis=1)
        return outputs

    # --- Calls ------------------------------------------------------------------

    def _bypasses_graph(self, inputs):
        """Whether a call goes past the functional graph (query stream, permutation, memory)."""
        if not isinstance(inputs, dict):
            return False
        extra = any(inputs.get(name) is not None for name in EXTRA_INPUTS)
        return extra or self.memory_length is not None

    def run_layers(self, inputs, training=None):
        """The output dict on `inputs` with its optional entries, checked first (see the class)."""
        check_inputs(self, inputs)
        self.check_extra_inputs(inputs)
        present = {name: value for name, value in inputs.items() if value is not None}
        return self._forward(present, training=training)

    def __call__(self, inputs, *args, **kwargs):
        if self._bypasses_graph(inputs):
            return self.run_layers(inputs, training=kwargs.get("training", args[0] if args else None))
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None, mask=None, **kwargs):
        # `fit`, `evaluate` and `predict` on JAX reach `call` without `__call__`.
        if self._bypasses_graph(inputs):
            return self.run_layers(inputs, training=training)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    def check_extra_inputs(self, inputs):
        """A one-line `ValueError` for a permutation mask, target mapping or memory that does not fit."""
        batch, length = tuple(inputs["token_ids"].shape)
        _check_shape("permutation_mask", inputs.get("permutation_mask"), (batch, length, length),
                     "(batch, sequence, sequence)")
        mapping = inputs.get("target_mapping")
        _check_shape("target_mapping", mapping, (batch, None, length), "(batch, predictions, sequence)")
        if mapping is not None and (isinstance(mapping, np.ndarray) or is_eager_tensor(mapping)):
            values = ops.convert_to_numpy(mapping)
            if not (np.isin(values, (0, 1)).all() and (values.sum(-1) == 1).all()):
                raise ValueError("target_mapping must be one-hot: each row a single 1 at the "
                                 "position it predicts, 0 elsewhere.")
        memory = inputs.get("memory")
        if memory is not None and len(memory.shape) == 4 and memory.shape[-1] != self.hidden_dim:
            raise ValueError(
                f"memory has width {memory.shape[-1]}, but this XLNet's hidden_dim is "
                f"{self.hidden_dim}: it comes from a model of another width."
            )
        _check_shape("memory", memory, (batch, self.num_layers, None, self.hidden_dim),
                     "(batch, num_layers, memory_length, hidden_dim)")


def _check_shape(name, value, expected, axes):
    """A `ValueError` when `value`'s shape differs from `expected` (None: any size)."""
    if value is None:
        return
    shape = tuple(value.shape)
    if len(shape) != len(expected) or any(
        want is not None and got is not None and got != want for got, want in zip(shape, expected)
    ):
        wanted = tuple("any" if size is None else size for size in expected)
        raise ValueError(f"{name} must have shape {axes} = {wanted}; received shape {shape}.")
