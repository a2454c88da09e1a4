"""Fixtures of the data-pipeline tests in tests/tasks."""

import pytest


@pytest.fixture(scope="module")
def vocab_path(request, tmp_path_factory):
    """A vocab.txt of the test module's `VOCABULARY` (for kbert's and Hugging Face's tokenizers)."""
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in request.module.VOCABULARY), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(vocab_path):
    """A `kbert.text.WordPieceTokenizer` on `vocab_path`."""
    from kbert.text import WordPieceTokenizer

    return WordPieceTokenizer(vocab_path)
