import keras
from keras import ops

from kbert.backend.ops import dense, take_rows
from kbert.input_checks import check_ids_in_range
from kbert.layers.direct_call import DirectCall


@keras.saving.register_keras_serializable(package="kbert")
class ReversibleEmbedding(DirectCall, keras.layers.Embedding):
    """A token embedding table that can also map hidden states to vocabulary logits.

    Called on integer ids it looks rows up like `keras.layers.Embedding`; called
    with `reverse=True` on hidden states of width `output_dim` it multiplies by
    the transposed table, giving logits over the vocabulary. This is how BERT's
    masked-LM decoder is tied to its input embeddings. In eager PyTorch
    inference on a few rows (a decoding step), a large vocabulary is read from
    a cached transposed copy of the table, which the CPU reads faster there
    (see `kbert.backend.ops.dense`).

    In eager mode, ids outside `[0, input_dim)` raise a `ValueError` instead of
    reading garbage (JAX) or failing deep inside the backend.

    Args:
        input_dim: vocabulary size.
        output_dim: embedding width.
        **kwargs: any other `keras.layers.Embedding` argument.

    Call arguments:
        inputs: integer ids `(...)`, or hidden states `(..., output_dim)` with
            `reverse=True`.
        reverse: project hidden states back to logits `(..., input_dim)`.
        scale: a Python factor on the looked-up rows (BART's `√d`), or on the
            hidden states before the reverse projection (T5 v1.0's `d^-0.5`), or None.

    Example:
    >>> table = ReversibleEmbedding(100, 8)
    >>> hidden = table(keras.ops.ones((2, 5), "int32"))
    >>> tuple(table(hidden, reverse=True).shape)
    (2, 5, 100)
    """

    def _check_reverse_width(self, shape):
        if shape[-1] is not None and shape[-1] != self.output_dim:
            raise ValueError(
                f"reverse=True expects hidden states of width {self.output_dim} "
                f"(the table's output_dim); received shape {tuple(shape)}."
            )

    def call(self, inputs, reverse=False, scale=None):
        # `scale` is applied inside the layer as a Python number, which keeps the
        # tensor's dtype; outside, a functional graph would replay it as a tensor
        # made from host data at every call on PyTorch.
        if reverse:
            self._check_reverse_width(inputs.shape)
            table = ops.cast(self.embeddings, self.compute_dtype)
            inputs = ops.cast(inputs, self.compute_dtype)
            inputs = inputs if scale is None else inputs * scale
            return dense(inputs, table, None, kernel_transposed=True)
        check_ids_in_range(inputs, self.input_dim, "Token id")
        rows = ops.cast(take_rows(self.embeddings, inputs), self.compute_dtype)
        return rows if scale is None else rows * scale

    def compute_output_shape(self, input_shape, reverse=False, scale=None):
        if reverse:
            self._check_reverse_width(input_shape)
            return tuple(input_shape[:-1]) + (self.input_dim,)
        return super().compute_output_shape(input_shape)

    def compute_output_spec(self, inputs, reverse=False, scale=None):
        shape = self.compute_output_shape(inputs.shape, reverse=reverse)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)


def tied_embedding_dim(token_embedding, vocabulary_size, embedding_dim):
    """The width an output head projects to before its tied decoder.

    With a `token_embedding` table it is the table's width (after checking the
    table has `vocabulary_size` rows); without one, `embedding_dim` as given.

    >>> tied_embedding_dim(None, 10, 4)
    4
    """
    if token_embedding is None:
        return embedding_dim
    if token_embedding.input_dim != vocabulary_size:
        raise ValueError(
            f"token_embedding has {token_embedding.input_dim} rows but "
            f"vocabulary_size is {vocabulary_size}."
        )
    return token_embedding.output_dim
