import keras

from kbert.arguments import positive_int
from kbert.layers.activations import get_activation, serialize_activation
from kbert.layers.fused_dense import FusedDense
from kbert.layers.sequence_shape import check_sequence_shape


@keras.saving.register_keras_serializable(package="kbert")
class Pooler(keras.layers.Layer):
    """BERT's pooler: `tanh(Dense(h[:, 0]))`, a summary vector from the first token.

    Args:
        hidden_dim: width of the pooled output.
        activation: activation of the dense layer (BERT: tanh).
        kernel_initializer: initializer of the dense kernel.

    Call arguments:
        inputs: `(batch, sequence, width)`.

    Example:
    >>> pooler = Pooler(hidden_dim=8)
    >>> tuple(pooler(keras.ops.ones((2, 5, 8))).shape)
    (2, 8)
    """

    def __init__(self, hidden_dim, activation="tanh", kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = positive_int("hidden_dim", hidden_dim)
        self.activation = activation
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.dense = FusedDense(
            self.hidden_dim,
            activation=get_activation(activation),
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="dense",
        )

    def build(self, inputs_shape):
        check_sequence_shape(self, inputs_shape, width="width")
        self.dense.build((inputs_shape[0], inputs_shape[-1]))
        self.built = True

    def call(self, inputs):
        return self.dense(inputs[:, 0, :])

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "activation": serialize_activation(self.activation),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
