"""`PretrainingReport`: what a `kbert pretrain` run measures, titles and shows once it has trained."""

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class PretrainingReport:
    """The end of a pretraining run: its held-out evaluation, the learning curve's title, its demo.

    Attributes:
        evaluate: `(pretrainer, held_out, train_documents, vocabulary, log)`
            to the held-out scores (a dict that goes into `metrics.json`),
            logged; `held_out` is what the objective's `data` gave.
        title: `(metrics)` to the learning curve's title.
        demo: `(pretrainer, vocabulary, held_out_documents, held_out,
            sequence_length, rng, log)`: prints what the model does on
            held-out text (fill in the blank, continue, reconstruct).

    >>> report = PretrainingReport(evaluate=dict, title=lambda metrics: metrics["model"], demo=print)
    >>> report.title({"model": "bert_tiny"})
    'bert_tiny'
    """

    evaluate: Callable
    title: Callable
    demo: Callable
