"""Models that wrap a backbone with heads and a loss, for fine-tuning and generation."""

from kbert.tasks.causal_lm import CausalLM
from kbert.tasks.classifier_distiller import ClassifierDistiller
from kbert.tasks.multiple_choice import MultipleChoice
from kbert.tasks.seq2seq_lm import Seq2SeqLM
from kbert.tasks.span_question_answering import SpanQuestionAnswering
from kbert.training.task import Task
from kbert.tasks.text_classifier import TextClassifier
from kbert.tasks.token_classifier import TokenClassifier


__all__ = [
    "CausalLM",
    "ClassifierDistiller",
    "MultipleChoice",
    "Seq2SeqLM",
    "SpanQuestionAnswering",
    "Task",
    "TextClassifier",
    "TokenClassifier",
]
