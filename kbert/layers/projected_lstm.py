import keras
from keras import ops

from kbert.arguments import positive_int, positive_number
from kbert.backend.ops import clip


@keras.saving.register_keras_serializable(package="kbert")
class ProjectedLSTM(keras.layers.Layer):
    """One direction of ELMo's LSTM: an LSTM whose output is projected, with clipping.

    AllenNLP's `LstmCellWithProjection`, step by step over the sequence
    (`keras.ops.scan`; `keras.layers.LSTM` has no projection nor clipping):

        i, f, g, o = split(x_t W_x + h_{t−1} W_h + b)       (cell_dim each)
        c_t = clip(σ(i) · tanh(g) + σ(f) · c_{t−1}, ±cell_clip)
        h_t = clip((σ(o) · tanh(c_t)) W_p, ±projection_clip)  (output_dim)

    The forget-gate bias starts at 1 (AllenNLP). Padding steps leave the state
    as it was and output zeros, so with `go_backwards=True` each row runs from
    its last real token back to its first, starting from a zero state, as if
    it had been reversed within its length: padding never leaks into it.

    Args:
        cell_dim: LSTM cells (ELMo: 4096).
        output_dim: width of the projected state `h` (ELMo: 512).
        cell_clip: clip of the cell state (ELMo: 3); `None` for none.
        projection_clip: clip of the projected state (ELMo: 3); `None` for none.
        go_backwards: run from the end of each row to its start.
        kernel_initializer: of the input, recurrent and projection kernels.

    Call arguments:
        inputs: `(batch, sequence, input_dim)`.
        padding_mask: `(batch, sequence)` of 0/1; all ones when omitted.

    Returns:
        `(batch, sequence, output_dim)`, zeros at padding.

    Example:
    >>> lstm = ProjectedLSTM(cell_dim=16, output_dim=4, cell_clip=3.0, projection_clip=3.0)
    >>> outputs = lstm(keras.ops.ones((2, 5, 6)), padding_mask=keras.ops.array([[1] * 5, [1, 1, 0, 0, 0]]))
    >>> keras.ops.convert_to_numpy(outputs)[1, 2:].tolist() == [[0.0] * 4] * 3
    True
    """

    def __init__(self, cell_dim, output_dim, cell_clip=None, projection_clip=None, go_backwards=False,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.cell_dim = positive_int("cell_dim", cell_dim)
        self.output_dim = positive_int("output_dim", output_dim)
        self.cell_clip = positive_number("cell_clip", cell_clip, optional=True)
        self.projection_clip = positive_number("projection_clip", projection_clip, optional=True)
        self.go_backwards = bool(go_backwards)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, inputs_shape, padding_mask_shape=None):
        gates = 4 * self.cell_dim

        def kernel(shape, name):
            initializer = keras.initializers.get(keras.initializers.serialize(self.kernel_initializer))
            return self.add_weight(shape=shape, initializer=initializer, name=name)

        self.input_kernel = kernel((inputs_shape[-1], gates), "input_kernel")
        self.recurrent_kernel = kernel((self.output_dim, gates), "recurrent_kernel")
        forget_bias = [0.0] * self.cell_dim + [1.0] * self.cell_dim + [0.0] * 2 * self.cell_dim
        self.bias = self.add_weight(shape=(gates,), initializer=keras.initializers.Constant(forget_bias),
                                    name="bias")
        self.projection_kernel = kernel((self.cell_dim, self.output_dim), "projection_kernel")
        self.built = True

    def call(self, inputs, padding_mask=None):
        dtype = self.compute_dtype
        if padding_mask is None:
            padding_mask = ops.ones(ops.shape(inputs)[:2], dtype)
        mask = ops.transpose(ops.cast(padding_mask, dtype))[:, :, None]  # (sequence, batch, 1)
        projected_inputs = ops.matmul(inputs, ops.cast(self.input_kernel, dtype))
        projected_inputs = ops.transpose(projected_inputs, (1, 0, 2)) + ops.cast(self.bias, dtype)
        batch = ops.shape(inputs)[0]
        zero_state = (ops.zeros((batch, self.output_dim), dtype), ops.zeros((batch, self.cell_dim), dtype))
        _, (outputs, _) = ops.scan(
            self._step, zero_state, (projected_inputs, mask), reverse=self.go_backwards
        )
        return ops.transpose(outputs, (1, 0, 2))

    def _step(self, state, step_inputs):
        """One step for the whole batch: the new `(h, c)` (kept at padding), twice.

        The second copy, the step's output, has `h` zeroed at padding; its cell
        state is returned only because TensorFlow's `scan` wants outputs shaped
        like the carry (a backward pass keeps every step's cell state anyway).
        """
        previous_output, previous_cell = state
        projected_input, mask = step_inputs
        dtype = self.compute_dtype
        gates = projected_input + ops.matmul(previous_output, ops.cast(self.recurrent_kernel, dtype))
        input_gate, forget_gate, candidate, output_gate = ops.split(gates, 4, axis=-1)
        cell = ops.sigmoid(input_gate) * ops.tanh(candidate) + ops.sigmoid(forget_gate) * previous_cell
        if self.cell_clip is not None:
            cell = clip(cell, -self.cell_clip, self.cell_clip)
        output = ops.matmul(ops.sigmoid(output_gate) * ops.tanh(cell), ops.cast(self.projection_kernel, dtype))
        if self.projection_clip is not None:
            output = clip(output, -self.projection_clip, self.projection_clip)
        kept_output = mask * output + (1 - mask) * previous_output
        kept_cell = mask * cell + (1 - mask) * previous_cell
        return (kept_output, kept_cell), (mask * output, kept_cell)

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        return tuple(inputs_shape[:-1]) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "cell_dim": self.cell_dim,
            "output_dim": self.output_dim,
            "cell_clip": self.cell_clip,
            "projection_clip": self.projection_clip,
            "go_backwards": self.go_backwards,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
