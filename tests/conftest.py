"""Test set-up shared by every test: quiet TensorFlow, a fixed seed, float32."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import pytest  # noqa: E402

import kbert  # noqa: E402,F401  (imports Keras quietly first)


@pytest.fixture(autouse=True)
def _reset_keras_state():
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()
