import keras
from keras import ops

from kbert.arguments import positive_int
from kbert.layers.activations import get_activation


@keras.saving.register_keras_serializable(package="kbert")
class Highway(keras.layers.Layer):
    """Highway layers (Srivastava et al. 2015) as AllenNLP's `Highway`, which ELMo uses.

    Each layer computes `g · x + (1 − g) · f(W_h x + b_h)` with the carry gate
    `g = sigmoid(W_g x + b_g)`, one `Dense(2 · width)` per layer whose first
    half is the transform and second half the gate. The gate bias starts at 1
    (AllenNLP: carry the input at first).

    Args:
        num_layers: how many highway layers are stacked.
        activation: the transform's activation (ELMo: `"relu"`).
        kernel_initializer: initializer of the kernels.

    Example:
    >>> highway = Highway(num_layers=2)
    >>> tuple(highway(keras.ops.ones((3, 5, 8))).shape)
    (3, 5, 8)
    """

    def __init__(self, num_layers=2, activation="relu", kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_layers = positive_int("num_layers", num_layers)
        self.activation = activation
        self.activation_fn = get_activation(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        width = input_shape[-1]
        self.highway_layers = []
        for index in range(self.num_layers):
            dense = keras.layers.Dense(
                2 * width,
                kernel_initializer=keras.initializers.get(self.kernel_initializer),
                bias_initializer=keras.initializers.Constant([0.0] * width + [1.0] * width),
                dtype=self.dtype_policy,
                name=f"highway_{index}",
            )
            dense.build(tuple(input_shape))
            self.highway_layers.append(dense)
        self.built = True

    def call(self, inputs):
        x = inputs
        for dense in self.highway_layers:
            transform, gate = ops.split(dense(x), 2, axis=-1)
            gate = ops.sigmoid(gate)
            x = gate * x + (1.0 - gate) * self.activation_fn(transform)
        return x

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_layers": self.num_layers,
            "activation": self.activation,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
