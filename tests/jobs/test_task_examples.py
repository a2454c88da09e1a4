"""TaskExamples collects every text of its examples."""

from kbert.jobs.task_examples import TaskExamples


def test_texts_of_every_example_kind():
    data = TaskExamples([
        {"text": "a", "text_pair": "b", "label": "x"},
        {"question": "q?", "context": "c."},
        {"words": ["New", "York"], "tags": ["B-LOC", "I-LOC"]},
        {"context": "ctx", "choices": ["one", "two"], "label": 0},
    ])
    assert data.texts() == ["a", "b", "q?", "c.", "New York", "ctx", "one", "two"]
