"""Models that wrap a backbone with heads and a loss, for fine-tuning and generation."""

from kbert.tasks.causal_lm import CausalLM
from kbert.tasks.multiple_choice import MultipleChoice
from kbert.tasks.seq2seq_lm import Seq2SeqLM
from kbert.tasks.span_question_answering import SpanQuestionAnswering
from kbert.tasks.task import Task
from kbert.tasks.text_classifier import TextClassifier
from kbert.tasks.token_classifier import TokenClassifier


def from_huggingface_task(path, num_choices=None, **overrides):
    """Build a kbert task model, fine-tuned head included, from a local Hugging Face checkpoint.

    See `kbert.checkpoints.task_head_converter.from_huggingface_task`; it lives
    in `kbert.checkpoints` and is imported on first use.
    """
    from kbert.checkpoints.task_head_converter import from_huggingface_task as load

    return load(path, num_choices=num_choices, **overrides)


__all__ = [
    "CausalLM",
    "MultipleChoice",
    "Seq2SeqLM",
    "SpanQuestionAnswering",
    "Task",
    "TextClassifier",
    "TokenClassifier",
    "from_huggingface_task",
]
