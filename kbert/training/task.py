"""The base class of kbert's models that wrap a backbone: pretrainers and fine-tuning tasks.

Beside `Task`, the input handling they all share: `require_keys` checks a dict
of inputs or targets, `backbone_inputs` picks the backbone's entries from it.
"""

import keras
from keras import ops

from kbert.backend.ops import compiled_training_step, compiles_training_steps
from kbert.input_checks import InputChecks, check_inputs
from kbert.serialization import constructor_config, deserialize_arguments


class Task(InputChecks, keras.Model):
    """A backbone (or several) with heads and a loss, trained with `compile` and `fit`.

    Subclasses take their backbones and options as constructor arguments, keep
    each as an attribute of the same name, and put their loss in
    `compute_loss`. This base owns the config: `get_config` reads the
    constructor's arguments back from the attributes, serializing the wrapped
    backbones, and `from_config` rebuilds them, so a task round-trips
    through `.keras` files with no code of its own.

    `preprocessor` (a `kbert.text.TextPreprocessor`, or `None`) lets the
    task read and write text; it is saved in the config, vocabulary included.

    Inputs and targets are checked (`kbert.input_checks`): the wrapped
    backbone's (`CHECKED_BACKBONE`), and the subclass's own `INPUT_TABLE` and
    `TARGET_TABLE`.

    Example:
    >>> import kbert
    >>> class Regressor(Task):
    ...     def __init__(self, backbone, **kwargs):
    ...         super().__init__(**kwargs)
    ...         self.backbone = backbone
    ...         self.head = keras.layers.Dense(1)
    ...     def call(self, inputs):
    ...         return self.head(self.backbone(inputs)["pooled_output"])
    >>> model = Regressor(kbert.models.bert_tiny(num_layers=1))
    >>> sorted(model.get_config())
    ['backbone', 'name', 'trainable']
    >>> Regressor.from_config(model.get_config()).backbone.num_layers
    1
    """

    CHECKED_BACKBONE = "backbone"

    def __init__(self, *args, preprocessor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.preprocessor = preprocessor

    def __call__(self, inputs, *args, **kwargs):
        check_inputs(self, inputs)
        return super().__call__(inputs, *args, **kwargs)

    def compile(self, *args, jit_compile="auto", **kwargs):
        """Keras' `compile`; a `jit_compile="auto"` is saved as "auto", to resolve again where the model loads.

        Keras saves what "auto" resolved to on this backend (True on JAX), so a
        model compiled on JAX would load on PyTorch with `torch.compile` on, and
        on TensorFlow with XLA on.
        """
        super().compile(*args, jit_compile=jit_compile, **kwargs)
        self._saved_jit_compile = jit_compile

    def get_compile_config(self):
        config = super().get_compile_config()
        if config and getattr(self, "_saved_jit_compile", None) == "auto":
            config["jit_compile"] = "auto"
        return config

    def compile_from_config(self, config):
        """Keras' `compile_from_config`, which skips models that override `compile` as this class does."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def make_train_function(self, force=False):
        """Keras' training step; under `jit_compile=True` on PyTorch, one `torch.compile` graph.

        Keras compiles its PyTorch step with `torch.compile` as it is, which
        breaks the graph at `loss.backward()` and at the optimizer's regex
        for weight decay (see `kbert.backend.torch_compilation.torch_compiled_training_step`).
        """
        if self.train_function is not None and not force:
            return self.train_function
        if not compiles_training_steps() or not self.jit_compile:
            return super().make_train_function(force)
        self.jit_compile = False  # Keras' eager step, compiled here instead
        try:
            super().make_train_function(force)
        finally:
            self.jit_compile = True
        self.train_function = compiled_training_step(self.train_function, self.optimizer,
                                                     self.trainable_variables)
        return self.train_function

    def get_config(self):
        config = constructor_config(self)
        if getattr(self, "preprocessor", None) is not None:
            config["preprocessor"] = self.preprocessor.get_config()
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        preprocessor = config.pop("preprocessor", None)
        model = cls(**deserialize_arguments(config))
        if preprocessor is not None:
            from kbert.text.text_preprocessor import TextPreprocessor

            model.preprocessor = TextPreprocessor.from_config(preprocessor)
        return model

    def text_preprocessor(self, call):
        """`self.preprocessor`, or a `ValueError` saying that the text-level `call` needs one."""
        if getattr(self, "preprocessor", None) is None:
            raise ValueError(
                f"This {type(self).__name__} has no preprocessor, so {call} cannot read text: set "
                "model.preprocessor = kbert.text.TextPreprocessor(tokenizer, ...) or pass token ids."
            )
        return self.preprocessor


def require_keys(mapping, keys, what, owner):
    """Raise a `ValueError` naming the missing entries when `mapping` lacks any of `keys`.

    >>> require_keys({"a": 1}, ("a",), "inputs", "Model")
    """
    if not isinstance(mapping, dict):
        raise ValueError(
            f"{owner} expects {what} as a dict with keys {list(keys)}; "
            f"received {type(mapping).__name__}."
        )
    missing = [key for key in keys if key not in mapping]
    if missing:
        raise ValueError(f"{owner} {what} lack {missing}; received keys {sorted(mapping)}.")


# Backbone inputs a batch may leave out: all segment 0; no global tokens (Longformer).
ZERO_WHEN_ABSENT = ("segment_ids", "global_attention_mask")


def backbone_inputs(backbone, inputs):
    """The entries of `inputs` that `backbone` takes; missing `ZERO_WHEN_ABSENT` entries become zeros.

    A `head_mask` entry is passed on too: an `Encoder` takes it beside its
    inputs (see `kbert.analysis.head_importance`).

    >>> import kbert
    >>> backbone = kbert.models.Encoder(vocabulary_size=10, num_layers=1, num_heads=1,
    ...     hidden_dim=4, intermediate_dim=4, max_positions=8, num_segments=0)
    >>> sorted(backbone_inputs(backbone, {"token_ids": 1, "padding_mask": 1, "mask_positions": 0}))
    ['padding_mask', 'token_ids']
    """
    selected = {}
    for name in backbone.input:
        if name in ZERO_WHEN_ABSENT and name not in inputs:
            selected[name] = ops.zeros_like(inputs["token_ids"])
        else:
            selected[name] = inputs[name]
    if isinstance(inputs, dict) and inputs.get("head_mask") is not None:
        selected["head_mask"] = inputs["head_mask"]
    return selected
