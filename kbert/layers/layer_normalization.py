import keras

from kbert.backend.ops import layer_normalization
from kbert.layers.direct_call import DirectCall


@keras.saving.register_keras_serializable(package="kbert")
class LayerNormalization(DirectCall, keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization`, called directly on eager PyTorch.

    The same layer, weights and config as Keras' (it is one). Its call skips
    Keras' layer bookkeeping where `DirectCall` allows it and, over the last
    axis, normalizes through `kbert.backend.ops.layer_normalization`: the
    same computation without Keras' per-call conversions (a GPT-2 decoding
    step makes 25 of these calls; each cost about 250 Python calls).

    Example:
    >>> norm = LayerNormalization(epsilon=1e-5)
    >>> tuple(norm(keras.ops.ones((2, 3, 4))).shape)
    (2, 3, 4)
    """

    def call(self, inputs):
        # Keras' build makes `axis` a list.
        if self.rms_scaling or self.axis not in ([-1], [len(inputs.shape) - 1]):
            return super().call(inputs)
        return layer_normalization(inputs, self.gamma, self.beta, self.epsilon, self.compute_dtype)
