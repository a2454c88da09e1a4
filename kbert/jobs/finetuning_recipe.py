"""`FinetuningRecipe`: what `kbert finetune` does for one task, as `kbert.jobs.finetuning_catalog.TASKS` holds it."""

import dataclasses
from collections.abc import Callable

from kbert.models.encoder import Encoder


@dataclasses.dataclass(frozen=True)
class FinetuningRecipe:
    """One task of `kbert finetune`: how it reads, batches, builds and scores, and on which backbone.

    Attributes:
        read: `(path, train)` to a `TaskExamples`; `train` is the training file's
            `TaskExamples` when `path` is the validation file, else `None`.
        dataset: `(data, tokenizer, sequence_length, batch_size, training=,
            seed=, pad_final_batch=, buckets=)` to a `tf.data.Dataset` of the task model's
            batches (`buckets`: length buckets, or None for fixed padding).
        model: `(backbone, train, features)` to the task model; `features`
            is the task models' argument (`"sequence_output"`: fine-tune
            the whole encoder; see `kbert.tasks.encoder_features`).
        evaluate: `(model, data, tokenizer, sequence_length, batch_size, buckets=)` to
            `(scores, prediction_rows)` (`buckets`: predict by length buckets).
        backbone_type: the kbert backbone class the task fine-tunes, or a tuple of them.

    >>> task = FinetuningRecipe(read=open, dataset=list, model=dict, evaluate=print)
    >>> task.backbone_type.__name__
    'Encoder'
    """

    read: Callable
    dataset: Callable
    model: Callable
    evaluate: Callable
    backbone_type: type = Encoder
