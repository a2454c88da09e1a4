"""The base class of kbert's backbones."""

import keras

from kbert.backend.private_state import compiled_loss, keras_tracked, tracks_attributes_as_torch_module
from kbert.arguments import no_unknown_keywords, positive_int
from kbert.input_checks import InputChecks, check_inputs
from kbert.serialization import constructor_arguments, constructor_config, deserialize_arguments


class Backbone(InputChecks, keras.Model):
    """A functional kbert backbone: dict inputs, dict outputs, no loss.

    Subclasses wire their functional graph and call
    `super().__init__(inputs=..., outputs=..., dtype=dtype)`, and keep each
    constructor argument as an attribute of the same name; this base owns the
    rest of what every backbone repeats:

    - layers may be set as attributes before `super().__init__` (the
      KerasHub habit), so methods that wire the graph can read them off
      `self` on every backend (PyTorch modules otherwise refuse attributes
      before their own initialisation);
    - the dtype policy, which functional models otherwise drop, is kept, so
      `dtype_policy` and the config carry it;
    - `get_config` is the constructor's arguments read back from the
      attributes, and `from_config` rebuilds the dtype policy.

    - its inputs are checked (`kbert.input_checks`) against the subclass's
      `INPUT_TABLE`: ids in range, 0/1 masks, lengths that agree;
    - the sizes every transformer backbone has are checked and kept by
      `set_transformer_sizes`.

    A backbone owns no loss: the pretrainers and tasks that wrap it do (the
    subclass names them in `TRAINED_BY`). Compiled without a `loss` and
    trained, it raises a `ValueError` naming them, on every backend (Keras
    alone raises on TensorFlow and PyTorch, and trains on a zero loss on JAX).

    Example:
    >>> import kbert
    >>> backbone = kbert.models.bert_tiny(num_layers=1, dtype="mixed_bfloat16")
    >>> isinstance(backbone, Backbone), backbone.dtype_policy.name
    (True, 'mixed_bfloat16')
    >>> copy = type(backbone).from_config(backbone.get_config())
    >>> copy.num_layers, copy.dtype_policy.name
    (1, 'mixed_bfloat16')
    """

    def set_transformer_sizes(self, vocabulary_size, num_layers, num_heads, hidden_dim,
                              intermediate_dim, key_dim=None):
        """Checks the sizes of a transformer stack and keeps them as attributes of the same name.

        Each is an integer >= 1; `hidden_dim` must divide by `num_heads`
        unless the heads have their own width `key_dim` (T5).

        >>> import kbert
        >>> kbert.models.GPT2(vocabulary_size=50, num_layers=1, num_heads=3, hidden_dim=8,
        ...                   intermediate_dim=16)
        Traceback (most recent call last):
        ...
        ValueError: hidden_dim=8 is not divisible by num_heads=3.
        """
        for name, value in (("vocabulary_size", vocabulary_size), ("num_layers", num_layers),
                            ("num_heads", num_heads), ("hidden_dim", hidden_dim),
                            ("intermediate_dim", intermediate_dim)):
            setattr(self, name, positive_int(name, value))
        if key_dim is None and hidden_dim % num_heads:
            hint = "; pass key_dim" if "key_dim" in constructor_arguments(type(self)) else ""
            raise ValueError(
                f"hidden_dim={hidden_dim} is not divisible by num_heads={num_heads}{hint}."
            )

    def __init__(self, *args, dtype=None, **kwargs):
        # Keras' functional models take unknown keywords silently.
        known = [*constructor_arguments(type(self)), "inputs", "outputs", "name", "trainable"]
        no_unknown_keywords(type(self).__name__, kwargs, known)
        super().__init__(*args, dtype=dtype, **kwargs)
        self.dtype_policy = dtype

    def __setattr__(self, name, value):
        # On PyTorch, `torch.nn.Module.__setattr__` refuses a layer before the
        # module is initialised: Keras tracks it as on the other backends (the
        # same variable order, so optimizer slots move between backends).
        if not tracks_attributes_as_torch_module(self):
            return object.__setattr__(self, *keras_tracked(self, name, value))
        return super().__setattr__(name, value)

    # The padding-mask inputs a call may leave out or pass as None: nothing is
    # padded, and the layers run directly (`run_layers`) with no mask, so that
    # attention reaches the fused kernel without a mask tensor (PyTorch's
    # flash kernel takes none) or with the causal rule as a flag.
    UNPADDED_MASKS = ()

    def bypasses_graph(self, inputs):
        """Whether a call on `inputs` runs the layers directly rather than the functional graph."""
        if not isinstance(inputs, dict) or all(inputs.get(name) is not None for name in self.UNPADDED_MASKS):
            return False  # asks nothing of the values: the common call stays as it was, traced or not
        return not any(keras.backend.is_keras_tensor(value) for value in inputs.values())

    def __call__(self, inputs, *args, **kwargs):
        if self.bypasses_graph(inputs):
            check_inputs(self, inputs)
            return self.run_layers(inputs, training=_training(args, kwargs))
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, *args, **kwargs):
        # `fit`, `evaluate` and `predict` on JAX reach `call` without `__call__`.
        if self.bypasses_graph(inputs):
            return self.run_layers(inputs, training=_training(args, kwargs))
        check_inputs(self, inputs)
        return super().call(inputs, *args, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if compiled_loss(self) is None and not self.losses:
            raise ValueError(
                f"{type(self).__name__} is a backbone and owns no loss: train it inside "
                f"{self.TRAINED_BY}, or compile it with a `loss`."
            )
        return super().compute_loss(x, y, y_pred, sample_weight, training)

    def get_config(self):
        config = constructor_config(self)
        config["dtype"] = keras.dtype_policies.serialize(self.dtype_policy)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**deserialize_arguments(config))


def _training(args, kwargs):
    """The `training` argument of a `__call__`/`call`, given by keyword or as the first positional one."""
    return kwargs.get("training", args[0] if args else None)
