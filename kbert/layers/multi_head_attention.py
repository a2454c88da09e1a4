import keras
from keras import ops

from kbert.arguments import one_of, positive_int, probability
from kbert.backend.ops import (
    fused_attention,
    fused_attention_dropout,
    fused_attention_supports,
    masked_score,
    reshape,
    with_causal_mask,
)
from kbert.layers.attention_mask import merge_attention_masks
from kbert.layers.direct_call import DirectCall
from kbert.layers.dropout import Dropout, apply_dropout, checked_dropout_prng
from kbert.layers.fused_dense import FusedDense
from kbert.layers.initializers import clone_initializer
from kbert.layers.sequence_shape import check_sequence_shape
from kbert.layers.sparse_attention import check_self_attention


# The kernels an attention layer may be asked for (`attention_implementation`).
ATTENTION_IMPLEMENTATIONS = ("auto", "fused", "explicit")


@keras.saving.register_keras_serializable(package="kbert")
class MultiHeadAttention(DirectCall, keras.layers.Layer):
    """Multi-head attention: query/key/value projections, a scoring kernel, an output projection.

    The scoring kernel is the method `attend`; sparse attention layers
    (BigBird, Longformer) subclass this layer and replace it, keeping the
    projections, masks and weight layout, so any of them plugs into
    `EncoderBlock`. The default dense kernel calls
    `kbert.backend.ops.fused_attention`, which takes the backend's fused kernel
    (PyTorch `scaled_dot_product_attention`, JAX/XLA's fused attention). When
    attention-probability dropout is active (training with `dropout > 0`),
    PyTorch's fused kernel applies it (`dropout_p`); on TensorFlow and JAX, or
    where value heads differ in width from key heads (which JAX's fused kernel
    does not take), or float16 where the backend's fused kernel does not
    compile (JAX on CPU), the kernel computes scores explicitly, with softmax
    in float32, so dropout can be applied to the probabilities as in BERT.

    Args:
        num_heads: number of heads.
        key_dim: width of each query/key head.
        value_dim: width of each value head; defaults to `key_dim`.
        output_dim: width of the output; defaults to the query's width.
        dropout: dropout rate on attention probabilities.
        use_bias: whether the projections have biases (T5: no).
        scale: factor on the scores; `None` is `1/sqrt(key_dim)` (T5: 1.0).
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        attention_implementation: the scoring kernel (`ATTENTION_IMPLEMENTATIONS`):
            "fused" (the backend's fused kernel; a call it cannot take is
            refused), "explicit" (scores computed in the open, any mask and
            dropout), or "auto" (fused where it can take the call, else
            explicit). docs/architecture.md §5 tabulates them.
        dropout_prng: the JAX generator of the probabilities' dropout mask
            (see `kbert.layers.Dropout`); None: the process default.

    Call arguments:
        query: `(batch, query_length, width)`.
        value: `(batch, key_length, width)`; defaults to `query` (self-attention).
        key: defaults to `value`.
        padding_mask: 0/1 `(batch, key_length)`, 1 for real keys.
        attention_mask: 0/1 `(batch, query_length, key_length)`.
        training: whether dropout is active.
        return_probabilities: also return the attention probabilities
            `(batch, heads, query_length, key_length)` the output was made with
            (after dropout), computed explicitly; the default path keeps the
            fused kernel. Sparse layers return them as a dense map, 0 outside
            their pattern, for short sequences (`sparse_attention.attention_with_pattern`).
        head_mask: optional `(heads,)` or `(batch, heads)` factors on each
            head's attention output (transformers' `head_mask`: 0 silences a
            head); applied to each head's context before the output
            projection, which equals scaling its probabilities, so the fused
            kernel stays on. Returned probabilities are scaled too.

    Example:
    >>> attention = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = keras.ops.ones((1, 3, 8))
    >>> tuple(attention(x, padding_mask=keras.ops.ones((1, 3))).shape)
    (1, 3, 8)
    """

    # Whether `call` takes a `global_attention_mask` (an attention with global
    # tokens); an `Encoder` built with such a layer adds that optional input.
    takes_global_attention_mask = False
    # Whether the layer attends a sequence to itself only (a sparse pattern):
    # `call` then rejects `value`, `key` and an `attention_mask`.
    self_attention_only = False

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        output_dim=None,
        dropout=0.0,
        use_bias=True,
        scale=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        attention_implementation="auto",
        dropout_prng=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention_implementation, self.dropout_prng = kernel_choices(attention_implementation, dropout_prng)
        self.num_heads = positive_int("num_heads", num_heads)
        self.key_dim = positive_int("key_dim", key_dim)
        self.value_dim = positive_int("value_dim", key_dim if value_dim is None else value_dim)
        self.output_dim = positive_int("output_dim", output_dim, optional=True)
        self.dropout = probability("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.scale = scale
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, dropout_prng=self.dropout_prng)

    def _dense(self, units, name):
        return FusedDense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        check_sequence_shape(self, query_shape, width="width", argument="query")
        value_shape = tuple(value_shape or query_shape)
        key_shape = tuple(key_shape or value_shape)
        output_dim = self.output_dim or query_shape[-1]
        self.query_dense, self.key_dense, self.value_dense = self._projections(
            "", query_shape, key_shape, value_shape
        )
        self.output_dense = self._dense(output_dim, "output_dense")
        self.output_dense.build(tuple(query_shape[:-1]) + (self.num_heads * self.value_dim,))
        self.built = True

    def _projections(self, suffix, query_shape, key_shape, value_shape):
        """The query, key and value projections, built; named `query<suffix>_dense` and so on."""
        projections = []
        for name, head_dim, shape in (
            ("query", self.key_dim, query_shape),
            ("key", self.key_dim, key_shape),
            ("value", self.value_dim, value_shape),
        ):
            dense = self._dense(self.num_heads * head_dim, f"{name}{suffix}_dense")
            dense.build(shape)
            projections.append(dense)
        return projections

    @property
    def score_scale(self):
        """The factor applied to `q·k`: `scale`, or `1/sqrt(key_dim)`."""
        return self.key_dim**-0.5 if self.scale is None else float(self.scale)

    def split_heads(self, x, head_dim):
        """`(batch, length, heads*head_dim)` -> `(batch, length, heads, head_dim)`."""
        shape = ops.shape(x)
        return reshape(x, (shape[0], shape[1], self.num_heads, head_dim))

    def call(
        self,
        query,
        value=None,
        key=None,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_probabilities=False,
        head_mask=None,
    ):
        if self.self_attention_only:
            check_self_attention(self, query, value, key, attention_mask, padding_mask=padding_mask)
        value = query if value is None else value
        key = value if key is None else key
        q = self.split_heads(self.query_dense(query), self.key_dim)
        k = self.split_heads(self.key_dense(key), self.key_dim)
        v = self.split_heads(self.value_dense(value), self.value_dim)
        mask = merge_attention_masks(padding_mask, attention_mask)
        if return_probabilities:
            context, probabilities = self.attend_with_probabilities(q, k, v, mask, training)
        else:
            context = self.attend(q, k, v, mask=mask, training=training)
        outputs = self.output_dense(self.merge_heads(mask_heads(self, context, head_mask)))
        if return_probabilities:
            return outputs, mask_heads(self, probabilities, head_mask, heads_axis=1)
        return outputs

    def merge_heads(self, context):
        """`(batch, length, heads, value_dim)` -> `(batch, length, heads*value_dim)`."""
        shape = ops.shape(context)
        return reshape(context, (shape[0], shape[1], self.num_heads * self.value_dim))

    def attend_with_probabilities(self, query, key, value, mask=None, training=None):
        """`attend` computed explicitly: `(context, probabilities (batch, heads, query, key))`."""
        return self._explicit_attention(query, key, value, mask, None, training)

    def attend(self, query, key, value, mask=None, training=None, bias=None,
               key_value_heads_first=False, causal=False):
        """The scoring kernel: softmax attention of projected heads.

        Args:
            query: `(batch, query_length, heads, key_dim)`.
            key: `(batch, key_length, heads, key_dim)`.
            value: `(batch, key_length, heads, value_dim)`.
            mask: bool, broadcastable to `(batch, heads, query_length, key_length)`.
            training: whether attention dropout is active.
            bias: float, broadcastable like `mask`, added to the scaled scores
                (T5's relative position bias), or None.
            key_value_heads_first: `key` and `value` come as `(batch, heads,
                key_length, head_dim)`, a key/value cache's layout.
            causal: query `i` attends only keys `j <= i` besides `mask` (a
                flag to the fused kernel, no mask tensor, where nothing else masks).

        Returns:
            `(batch, query_length, heads, value_dim)`.
        """
        dropping = training and self.dropout > 0
        if self._takes_fused_kernel(query, value, dropping):
            rate = self.dropout_layer.rate if dropping else 0.0
            return fused_attention(query, key, value, mask, self.score_scale, rate, bias,
                                   key_value_heads_first, causal)
        if key_value_heads_first:
            key, value = (ops.transpose(x, (0, 2, 1, 3)) for x in (key, value))
        if causal:
            mask = with_causal_mask(mask, query.shape[1], key.shape[1])
        return self._explicit_attention(query, key, value, mask, bias, training)[0]

    def _takes_fused_kernel(self, query, value, dropping):
        """Whether `attend` runs the fused kernel, by `attention_implementation`; "fused" refuses a
        call the kernel cannot take.

        JAX's fused kernel needs value heads as wide as key heads; float16
        does not compile where the backend cannot (JAX on the CPU); attention
        dropout in training is the fused kernel's only on PyTorch's fast path.
        """
        if self.attention_implementation == "explicit":
            return False
        reason = None
        if query.shape[-1] != value.shape[-1]:
            reason = "value heads differ in width from key heads"
        elif not fused_attention_supports(query.dtype):
            reason = f"the backend's fused kernel does not compile for {query.dtype} here"
        elif dropping and not fused_attention_dropout():
            reason = "attention dropout in training is the fused kernel's only on PyTorch's fast path"
        if reason is not None and self.attention_implementation == "fused":
            raise ValueError(f"{self.name}: attention_implementation='fused' cannot take this call: "
                             f"{reason}; use 'auto' or 'explicit'.")
        return reason is None

    def _explicit_attention(self, query, key, value, mask, bias, training):
        """`(context, probabilities)` with the scores computed explicitly (see `_probabilities`)."""
        scores = ops.einsum("bqnh,bknh->bnqk", query, key)
        probabilities = self._probabilities(scores, mask, bias, training)
        return ops.einsum("bnqk,bknh->bqnh", probabilities, value), probabilities

    def _probabilities(self, scores, mask, bias, training):
        """Softmax (in float32) of the scaled scores plus `bias` (or None), masked, with dropout."""
        scores = ops.cast(scores, "float32") * self.score_scale
        if bias is not None:
            scores = scores + ops.cast(bias, "float32")
        if mask is not None:
            scores = ops.where(mask, scores, masked_score("float32"))
        probabilities = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        return apply_dropout(self.dropout_layer, probabilities, training)

    def head_projections(self):
        """`[(dense, head_width)]`: the projections whose outputs are split into heads.

        `output_dense` takes its inputs in the same head order, `value_dim` wide each.
        """
        return [(self.query_dense, self.key_dim), (self.key_dense, self.key_dim),
                (self.value_dense, self.value_dim)]

    def arguments_keeping_heads(self, heads):
        """The constructor arguments that differ in this layer with only `heads` (indices) kept.

        >>> MultiHeadAttention(num_heads=4, key_dim=2).arguments_keeping_heads([0, 3])
        {'num_heads': 2}
        """
        return {"num_heads": len(heads)}

    def compute_output_shape(self, query_shape, *args, **kwargs):
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def compute_output_spec(self, query, value=None, key=None, *args, return_probabilities=False,
                            **kwargs):
        output = keras.KerasTensor(self.compute_output_shape(query.shape), self.compute_dtype)
        if not return_probabilities:
            return output
        keys = key if key is not None else value if value is not None else query
        return output, probabilities_spec(query, keys, self.num_heads, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "output_dim": self.output_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "scale": self.scale,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "attention_implementation": self.attention_implementation,
                "dropout_prng": self.dropout_prng,
            }
        )
        return config


def mask_heads(layer, x, head_mask, heads_axis=2):
    """`x` with each head's slice on `heads_axis` multiplied by its entry of `head_mask`.

    Args:
        layer: the attention layer (its `num_heads`; named in errors).
        x: per-head values, batch first: a context `(batch, length, heads,
            dim)` (`heads_axis=2`) or probabilities `(batch, heads, query,
            key)` (`heads_axis=1`).
        head_mask: None (`x` is returned as it is), or float `(heads,)` or
            `(batch, heads)`.

    >>> layer = MultiHeadAttention(num_heads=2, key_dim=1)
    >>> x = keras.ops.ones((1, 1, 2, 1))
    >>> keras.ops.convert_to_numpy(mask_heads(layer, x, [0.0, 2.0])).ravel().tolist()
    [0.0, 2.0]
    """
    if head_mask is None:
        return x
    head_mask = ops.convert_to_tensor(head_mask)
    if len(head_mask.shape) not in (1, 2) or head_mask.shape[-1] != layer.num_heads:
        raise ValueError(
            f"{type(layer).__name__}: head_mask must have shape (num_heads,) or (batch, "
            f"num_heads) with num_heads={layer.num_heads}; received shape "
            f"{tuple(head_mask.shape)}."
        )
    shape = [1] * len(x.shape)
    shape[heads_axis] = layer.num_heads
    if len(head_mask.shape) == 2:
        shape[0] = -1
    return x * ops.reshape(ops.cast(head_mask, x.dtype), shape)


def probabilities_spec(query, keys, num_heads, dtype):
    """The symbolic attention probabilities `(batch, heads, query_length, key_length)` of a call."""
    return keras.KerasTensor((query.shape[0], num_heads, query.shape[1], keys.shape[1]), dtype)


def block_output_spec(block, inputs, num_heads, return_attention_probabilities):
    """What a self-attention `block` returns on symbolic `inputs`: their spec, and the probabilities' if asked."""
    output = keras.KerasTensor(inputs.shape, block.compute_dtype)
    if not return_attention_probabilities:
        return output
    return output, probabilities_spec(inputs, inputs, num_heads, block.compute_dtype)


def kernel_choices(attention_implementation, dropout_prng):
    """`(attention_implementation, dropout_prng)`, each checked: one of `ATTENTION_IMPLEMENTATIONS`, and None
    or one of `kbert.layers.Dropout`'s generators (a one-line error otherwise).

    >>> kernel_choices("explicit", None)
    ('explicit', None)
    """
    return one_of("attention_implementation", attention_implementation, ATTENTION_IMPLEMENTATIONS), (
        checked_dropout_prng(dropout_prng))
