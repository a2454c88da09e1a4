"""Backbones and the builder functions users call."""

from kbert.models.encoder import ATTENTION_LAYERS, Encoder
from kbert.models.presets import (
    PRESETS,
    albert_base,
    albert_large,
    albert_xlarge,
    albert_xxlarge,
    bert_base,
    bert_large,
    bert_medium,
    bert_mini,
    bert_small,
    bert_tiny,
    build,
    distilbert_base,
    electra_base,
    electra_base_generator,
    electra_large,
    electra_large_generator,
    electra_small,
    electra_small_generator,
    roberta_base,
    roberta_large,
)


def from_huggingface(path, **overrides):
    """Build a kbert model from a local Hugging Face checkpoint directory.

    See `kbert.checkpoints.huggingface.from_huggingface`; it lives in
    `kbert.checkpoints` (which depends on `kbert.models`, not the reverse) and is
    imported on first use.
    """
    from kbert.checkpoints.huggingface import from_huggingface as load

    return load(path, **overrides)
