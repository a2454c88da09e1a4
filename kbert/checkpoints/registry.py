"""The one table of checkpoint converters, keyed by Hugging Face `model_type`.

Each converter module calls `register_converter` for its families when it is
imported; `kbert.checkpoints.huggingface` imports them all, and
`from_huggingface` reads the table through `converter_for`.

>>> import kbert.checkpoints  # registers the converters
>>> converter_for("roberta").task_prefix
'roberta.'
>>> "xlm-roberta" in supported_model_types()
True
"""

_CONVERTERS = {}


def register_converter(converter):
    """Register `converter` (a `kbert.checkpoints.converter.Converter`) for its `model_types`.

    Returns the converter, so a module can write `X = register_converter(...)`.

    Raises:
        ValueError: a converter has no `model_types`, or one of them is taken.
    """
    if not converter.model_types:
        raise ValueError(f"{converter!r} names no model_types to register under.")
    for model_type in converter.model_types:
        if model_type in _CONVERTERS:
            raise ValueError(
                f"model_type {model_type!r} already has a converter: {_CONVERTERS[model_type]!r}."
            )
    for model_type in converter.model_types:
        _CONVERTERS[model_type] = converter
    return converter


def supported_model_types():
    """The registered `model_type`s, sorted."""
    return sorted(_CONVERTERS)


def converter_for(model_type):
    """The converter registered for `model_type`.

    Raises:
        ValueError: no converter is registered for it; the message lists those that are.
    """
    if model_type not in _CONVERTERS:
        raise ValueError(
            f"Unsupported model_type {model_type!r}; supported: {supported_model_types()}."
        )
    return _CONVERTERS[model_type]
