import keras
from keras import ops

from kbert.arguments import positive_int, positive_number


@keras.saving.register_keras_serializable(package="kbert")
class ScalarMix(keras.layers.Layer):
    """ELMo's task-weighted mix of layers: `γ · Σ_j softmax(s)_j · h_j`.

    `s` (one scalar per layer, starting equal) and `γ` (starting at 1) are
    learned with the task (Peters et al. 2018, eq. 1). With `layer_norm=True`
    each layer is first normalized as AllenNLP's `ScalarMix(do_layer_norm=True)`
    does: `(h_j − mean) / √(var + ε)`, with one mean and variance per layer over
    every non-padding token and feature of the batch (docs/algorithms.md §14).
    The mix runs in float32.

    Args:
        num_layers: how many layers are mixed.
        layer_norm: normalize each layer before mixing.
        epsilon: added to the variance (AllenNLP: 1e-13).

    Call arguments:
        inputs: a list of `num_layers` tensors `(batch, ..., width)` of one
            shape, or one tensor `(batch, num_layers, ..., width)`.
        padding_mask: `(batch, sequence)` of 0/1, where the inputs are
            `(batch, sequence, width)`: the tokens the layer-norm statistics
            count. All tokens when omitted.

    Example:
    >>> mix = ScalarMix(num_layers=3)
    >>> layers = [keras.ops.ones((2, 5, 8)) * i for i in range(3)]
    >>> keras.ops.convert_to_numpy(mix(layers))[0, 0, 0]  # equal weights: the mean
    np.float32(1.0)

    References:
        Peters et al., "Deep contextualized word representations", NAACL 2018.
    """

    def __init__(self, num_layers, layer_norm=False, epsilon=1e-13, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = positive_int("num_layers", num_layers)
        self.layer_norm = bool(layer_norm)
        self.epsilon = positive_number("epsilon", epsilon)

    def build(self, inputs_shape, padding_mask_shape=None):
        self.layer_weights = self.add_weight(
            shape=(self.num_layers,), initializer="zeros", name="layer_weights"
        )
        self.gamma = self.add_weight(shape=(), initializer="ones", name="gamma")
        self.built = True

    def call(self, inputs, padding_mask=None):
        layers = self._stacked(inputs)
        if self.layer_norm:
            layers = self._normalized(layers, padding_mask)
        weights = ops.softmax(ops.cast(self.layer_weights, "float32"))
        weights = ops.reshape(weights, (1, self.num_layers) + (1,) * (len(layers.shape) - 2))
        mixed = ops.cast(self.gamma, "float32") * ops.sum(weights * layers, axis=1)
        return ops.cast(mixed, self.compute_dtype)

    def _stacked(self, inputs):
        """The layers as one float32 tensor `(batch, num_layers, ..., width)`, their count checked."""
        if isinstance(inputs, (list, tuple)):
            count = len(inputs)
            shapes = {tuple(x.shape) for x in inputs}
            if len(shapes) > 1:
                raise ValueError(f"ScalarMix layers must share one shape; received shapes {sorted(shapes)}.")
            inputs = ops.stack(inputs, axis=1)
        else:
            count = inputs.shape[1]
        if count != self.num_layers:
            raise ValueError(f"ScalarMix was built for {self.num_layers} layers; received {count}.")
        return ops.cast(inputs, "float32")

    def _normalized(self, layers, padding_mask):
        """Each layer over its own statistics, counted on the non-padding tokens of the batch."""
        if padding_mask is None:
            mask = ops.ones_like(layers[..., :1])
        else:
            self._check_padding_mask(layers, padding_mask)
            mask = ops.cast(padding_mask, "float32")[:, None, :, None]
        axes = [0] + list(range(2, len(layers.shape)))
        count = ops.sum(mask * ops.ones_like(layers), axis=axes, keepdims=True)
        mean = ops.sum(layers * mask, axis=axes, keepdims=True) / count
        variance = ops.sum(ops.square((layers - mean) * mask), axis=axes, keepdims=True) / count
        return (layers - mean) / ops.sqrt(variance + self.epsilon)

    def _check_padding_mask(self, layers, padding_mask):
        lengths = {padding_mask.shape[1], layers.shape[2]} - {None}
        if len(layers.shape) != 4 or len(padding_mask.shape) != 2 or len(lengths) > 1:
            raise ValueError(
                "ScalarMix padding_mask must be (batch, sequence) for layers of shape (batch, "
                f"sequence, width); received {tuple(padding_mask.shape)} for layers of shape "
                f"{(layers.shape[0], *layers.shape[2:])}."
            )

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        if isinstance(inputs_shape, (list, tuple)) and isinstance(inputs_shape[0], (list, tuple)):
            return tuple(inputs_shape[0])
        return (inputs_shape[0],) + tuple(inputs_shape[2:])

    def get_config(self):
        config = super().get_config()
        config.update({"num_layers": self.num_layers, "layer_norm": self.layer_norm,
                       "epsilon": self.epsilon})
        return config
