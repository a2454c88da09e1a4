"""TaskData collects every text of its examples."""

from kbert.tasks.task_data import TaskData


def test_texts_of_every_example_kind():
    data = TaskData([
        {"text": "a", "text_pair": "b", "label": "x"},
        {"question": "q?", "context": "c."},
        {"words": ["New", "York"], "tags": ["B-LOC", "I-LOC"]},
        {"context": "ctx", "choices": ["one", "two"], "label": 0},
    ])
    assert data.texts() == ["a", "b", "q?", "c.", "New York", "ctx", "one", "two"]
