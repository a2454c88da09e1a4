"""Test set-up shared by every test: quiet TensorFlow, a fixed seed, float32; the vocabulary fixtures."""

import importlib.util

import kbert  # noqa: F401  (first: imports Keras with TensorFlow's start-up lines silenced)
import keras
import pytest

from kbert.backend_utils import quiet_import

# `keras.utils.set_random_seed` also seeds TensorFlow whenever it is installed,
# importing it on every backend; import it here with its start-up lines kept
# quiet. (tests/test_import.py checks, in a fresh process, that kbert itself
# never imports TensorFlow under JAX or PyTorch.)
if importlib.util.find_spec("tensorflow") is not None:
    quiet_import("tensorflow")


@pytest.fixture(autouse=True)
def _reset_keras_state():
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)


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
