"""TaskExamples collects every text of its examples."""

import pytest

from kbert.jobs.task_examples import TaskExamples

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run


def test_texts_of_every_example_kind():
    data = TaskExamples([
        {"text": "a", "text_pair": "b", "label": "x"},
        {"question": "q?", "context": "c."},
        {"words": ["New", "York"], "tags": ["B-LOC", "I-LOC"]},
        {"context": "ctx", "choices": ["one", "two"], "label": 0},
    ])
    assert data.texts() == ["a", "b", "q?", "c.", "New York", "ctx", "one", "two"]
