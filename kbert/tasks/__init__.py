"""Models that wrap a backbone with heads and a loss, for fine-tuning and generation."""

from kbert.tasks.task import Task

__all__ = ["Task"]
