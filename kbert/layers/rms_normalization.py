import keras

from kbert.arguments import positive_number
from kbert.backend.ops import rms_normalization
from kbert.layers.direct_call import DirectCall


@keras.saving.register_keras_serializable(package="kbert")
class RMSNormalization(DirectCall, keras.layers.Layer):
    """Root-mean-square normalization (T5's "LayerNorm"): `scale · x / √(mean(x²) + ε)`.

    No mean subtraction and no bias (docs/algorithms.md §8). The statistics are
    computed in float32 whatever the compute dtype, as in the reference.

    Args:
        epsilon: added to the mean square (T5: 1e-6).

    Call arguments:
        inputs: `(..., width)`.

    Example:
    >>> norm = RMSNormalization()
    >>> tuple(norm(keras.ops.ones((2, 3, 8))).shape)
    (2, 3, 8)
    """

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = positive_number("epsilon", epsilon)

    def build(self, inputs_shape):
        if len(inputs_shape) < 1 or inputs_shape[-1] is None:
            raise ValueError(
                "RMSNormalization needs inputs with a known last dimension; "
                f"received shape {tuple(inputs_shape)}."
            )
        self.scale = self.add_weight(
            shape=(inputs_shape[-1],), initializer="ones", name="scale"
        )
        self.built = True

    def call(self, inputs):
        return rms_normalization(inputs, self.scale, self.epsilon, self.compute_dtype)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config
