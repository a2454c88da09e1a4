"""The base class of kbert's models that wrap a backbone: pretrainers and fine-tuning tasks."""

import keras

from kbert.serialization import attribute_config, deserialize_arguments


class Task(keras.Model):
    """A backbone (or several) with heads and a loss, trained with `compile` and `fit`.

    Subclasses take their backbones and options as constructor arguments, keep
    each as an attribute of the same name, and put their loss in
    `compute_loss`. This base owns the config: `get_config` reads the
    constructor's arguments back from the attributes, serializing the wrapped
    backbones, and `from_config` rebuilds them, so a task round-trips
    through `.keras` files with no code of its own.

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

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        config.update(attribute_config(self, skip=("name",)))
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**deserialize_arguments(config))
