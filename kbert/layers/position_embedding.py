import keras
from keras import ops

from kbert.arguments import positive_int
from kbert.backend.ops import take_rows
from kbert.input_checks import check_ids_in_range
from kbert.backend.ops import positions_from
from kbert.layers.direct_call import DirectCall
from kbert.layers.sequence_shape import check_sequence_shape


@keras.saving.register_keras_serializable(package="kbert")
class PositionEmbedding(DirectCall, keras.layers.Layer):
    """A learned absolute position embedding table (BERT, RoBERTa, ALBERT, ...).

    Returns the rows for positions `offset .. offset+n-1` of an input of
    length `n` (broadcast over the batch; `offset` 0 by default, BART's 2 plus
    the decoding step), or the rows named by explicit `positions`.

    Args:
        max_positions: number of rows in the table; the longest sequence it serves.
        initializer: initializer of the table (BERT: truncated normal, std 0.02).

    Call arguments:
        inputs: a tensor `(batch, sequence, width)` whose length and width are used.
        positions: optional int tensor `(batch, sequence)` of rows to look up.
        offset: int or scalar int tensor: the first row read without `positions`.

    Example:
    >>> layer = PositionEmbedding(max_positions=16)
    >>> tuple(layer(keras.ops.zeros((2, 10, 8))).shape)
    (2, 10, 8)
    """

    def __init__(self, max_positions, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_positions = positive_int("max_positions", max_positions)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        check_sequence_shape(self, input_shape, width="width")
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_positions, input_shape[-1]),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, positions=None, offset=0):
        length = inputs.shape[1]
        if positions is not None:
            check_ids_in_range(positions, self.max_positions, "Position id")
            return ops.cast(take_rows(self.embeddings, positions), self.compute_dtype)
        shape = ops.shape(inputs)
        table = ops.convert_to_tensor(self.embeddings)
        if isinstance(offset, int):
            self._check_length(None if length is None else length + offset)
            rows = ops.slice(table, (offset, 0), (shape[1], shape[2]))
        else:  # a gather: a sliced tensor start is read back to the host on PyTorch
            rows = ops.take(table, positions_from(shape[1], offset), axis=0)
        return ops.broadcast_to(ops.cast(rows, self.compute_dtype)[None], shape)

    def _check_length(self, length):
        if length is not None and length > self.max_positions:
            raise ValueError(
                f"Sequence length {length} exceeds the {self.max_positions} "
                "positions of the position embedding table."
            )

    def compute_output_shape(self, input_shape):
        self._check_length(input_shape[1])
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_positions": self.max_positions,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
