"""The `Encoder` an analysis works on: the model itself, or the one it wraps."""

from kbert.models.encoder import Encoder


def wrapped_encoder(model, caller):
    """`model` if it is an `Encoder`, else its `backbone` if that is one; a `ValueError` otherwise.

    `caller` (the analysis function's name) is named in the error.

    >>> encoder = kbert.models.bert_tiny(num_layers=1)
    >>> wrapped_encoder(kbert.tasks.TextClassifier(encoder, num_classes=2), "example") is encoder
    True
    """
    encoder = model if isinstance(model, Encoder) else getattr(model, "backbone", None)
    if not isinstance(encoder, Encoder):
        raise ValueError(
            f"{caller} takes a kbert Encoder or a model with an Encoder `backbone`; "
            f"received a {type(model).__name__}."
        )
    return encoder
