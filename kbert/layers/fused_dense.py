import keras

from kbert.backend.ops import dense
from kbert.backend.private_state import stored_kernel
from kbert.layers.direct_call import DirectCall


@keras.saving.register_keras_serializable(package="kbert")
class FusedDense(DirectCall, keras.layers.Dense):
    """`keras.layers.Dense` whose bias is added inside the matmul on PyTorch.

    The same layer, weights and config as Keras' `Dense`; only `call` differs:
    it goes through `kbert.backend.ops.dense`, one `addmm` on PyTorch
    instead of a matmul and a separate pass for the bias (TensorFlow and JAX
    fuse that add under XLA already). LoRA works as in `Dense` (`self.kernel`
    includes it); quantized modes use Keras' own quantized call, so `call`
    reads the stored kernel itself without LoRA (`Dense.kernel` resolves the
    quantization modes first: 3 µs a call on eager PyTorch, a fifth of a
    decoding step's projection).

    Example:
    >>> layer = FusedDense(4, activation="relu")
    >>> tuple(layer(keras.ops.ones((2, 3, 5))).shape)
    (2, 3, 4)
    """

    def call(self, inputs):
        kernel = self.kernel if self.lora_enabled else stored_kernel(self)
        return self.activation(dense(inputs, kernel, self.bias))
