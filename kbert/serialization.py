"""Configs read off a model's constructor: the one place kbert writes `get_config`/`from_config`.

Every constructor argument of a kbert backbone or task is kept as an
attribute of the same name (docs/architecture.md §3.3), so the config is the constructor's
signature read back from the instance. Keras objects among the arguments (a
wrapped backbone, a dtype policy) are serialized, and rebuilt by `from_config`.
"""

import inspect

import keras


def constructor_arguments(cls):
    """The named arguments of `cls.__init__`, without `self`, `*args` and `**kwargs`.

    >>> class Model:
    ...     def __init__(self, width, depth=2, *args, name=None, **kwargs):
    ...         pass
    >>> constructor_arguments(Model)
    ['width', 'depth', 'name']
    """
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [p.name for p in parameters if p.kind in kinds]


def _serialize(value):
    if isinstance(value, (keras.Layer, keras.DTypePolicy)):
        return keras.saving.serialize_keras_object(value)
    return value


def _is_serialized_object(value):
    return isinstance(value, dict) and "class_name" in value and "config" in value


def attribute_config(model, skip=()):
    """`{argument: value}` for each constructor argument of `model`, read from its attributes.

    Keras layers and models among the values are serialized.
    """
    return {
        name: _serialize(getattr(model, name))
        for name in constructor_arguments(type(model))
        if name not in skip
    }


def constructor_config(model):
    """`model`'s name, `trainable` and constructor arguments (`attribute_config`): its `get_config`.

    `deserialize_arguments` of it gives the arguments that rebuild `model`.

    >>> import kbert
    >>> config = constructor_config(kbert.models.bert_tiny(num_layers=1))
    >>> config["num_layers"], config["trainable"], "name" in config
    (1, True, True)
    """
    config = {"name": model.name, "trainable": model.trainable}
    return {**config, **attribute_config(model, skip=("name",))}


def deserialize_arguments(config):
    """A copy of `config` with every serialized Keras object (model, dtype policy) rebuilt.

    >>> deserialize_arguments({"width": 4, "dtype": {"module": "keras", "class_name":
    ...     "DTypePolicy", "config": {"name": "bfloat16"}, "registered_name": None}})["dtype"].name
    'bfloat16'
    """
    return {
        name: keras.saving.deserialize_keras_object(value)
        if _is_serialized_object(value)
        else value
        for name, value in config.items()
    }
