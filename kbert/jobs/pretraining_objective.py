"""`PretrainingObjective`: what `kbert pretrain` does for one objective, as
`kbert.jobs.objective_catalog.OBJECTIVES` holds it."""

import dataclasses
from collections.abc import Callable, Mapping

from kbert.jobs.pretraining_report import PretrainingReport
from kbert.jobs.run_outputs import SAVED_FILES
from kbert.jobs.vocabulary_kind import VocabularyKind

# How a model of an objective that trains its models alone is refused (see `refusal`).
TRAINS_ALONE = ("--objective {name} trains {model_kind} ({models}) and they train with it alone; received "
                "--model {model} --objective {objective} (for example --model {default_model} --objective {name}).")


@dataclasses.dataclass(frozen=True)
class PretrainingObjective:
    """One objective of `kbert pretrain`: its models, vocabulary, model, pretrainer, data and report.

    `kbert.jobs.pretraining_run.run_pretraining` reads these fields and
    nothing else of the objective, in the order listed.

    Attributes:
        models: the presets it pretrains (a `kbert.models.presets` table).
        default_model: the one of `models` for short runs.
        model_kind: what `models` are, for the error that refuses another model ("the decoders").
        refusal: the error when a model not in `models` is asked for, a
            `str.format` template of `name` (the objective), `model_kind`,
            `models`, `default_model`, and the `model` and `objective`
            received (`TRAINS_ALONE` for most). `None` where the objective
            shares its models with others (the encoders'): a model of another
            objective is then refused in that objective's words, with
            `TRAINS_ALONE`.
        vocabulary: its `VocabularyKind`.
        model: `(name, vocabulary)` to the backbone, sized to the vocabulary, for a short run.
        pretrainer: `(backbone, vocabulary)` to the model that trains (uncompiled).
        data: `(train_documents, held_out_documents, vocabulary,
            sequence_length, batch_size, seed)` to `(train, held_out)`: an
            endless `tf.data.Dataset` of batches for `fit` and what the
            report's `evaluate` and `demo` read of the held-out documents.
            Raises a `ValueError` when the held-out documents fill no batch.
        report: its `PretrainingReport`.

    >>> from kbert.jobs.vocabulary_kind import WORD_PIECE
    >>> objective = PretrainingObjective(
    ...     models={"bert_tiny": {}}, default_model="bert_tiny", model_kind="the encoders", refusal=None,
    ...     vocabulary=WORD_PIECE, model=print, pretrainer=print, data=print,
    ...     report=PretrainingReport(evaluate=print, title=print, demo=print))
    >>> objective.outputs
    ('vocab.txt', 'model.keras', 'metrics.json', 'learning_curve.png')
    >>> objective.packages
    ('tensorflow', 'tensorflow_text', 'matplotlib')
    """

    models: Mapping[str, dict]
    default_model: str
    model_kind: str
    refusal: str | None
    vocabulary: VocabularyKind
    model: Callable
    pretrainer: Callable
    data: Callable
    report: PretrainingReport

    @property
    def packages(self):
        """The import names of the optional packages a run needs: its vocabulary's, and matplotlib's curve."""
        return (*self.vocabulary.packages, "matplotlib")

    @property
    def outputs(self):
        """The files a finished run leaves in its output folder (`run.json` aside)."""
        return (*self.vocabulary.files, *SAVED_FILES)

    def refuse(self, name, model, objective, template=None):
        """The `ValueError` refusing `--model model --objective objective`, in the words of objective `name` (this one).

        `template` is `TRAINS_ALONE` where this objective's models are asked
        for with another objective; by default, `refusal`.
        """
        message = (template or self.refusal).format(
            name=name, model_kind=self.model_kind, models=", ".join(self.models), default_model=self.default_model,
            model=model, objective=objective)
        return ValueError(message)
