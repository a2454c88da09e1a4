"""`import kbert` stays light and quiet: no TensorFlow under JAX/PyTorch, no TF log noise."""

import os
import subprocess
import sys

import keras
import pytest

BACKEND = keras.backend.backend()


def run_python(code, *args):
    env = dict(os.environ, KERAS_BACKEND=BACKEND)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return subprocess.run(
        [sys.executable, *args] if args else [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the TensorFlow backend needs TensorFlow")
def test_import_and_use_without_tensorflow():
    result = run_python(
        "import sys, numpy as np, kbert\n"
        "model = kbert.models.bert_tiny()\n"
        "model({'token_ids': np.ones((1, 4), 'int32'), 'segment_ids': np.zeros((1, 4), 'int32'),"
        " 'padding_mask': np.ones((1, 4), 'int32')})\n"
        "print('tensorflow' in sys.modules)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_python_dash_m_kbert_runs_quietly():
    result = run_python(None, "-m", "kbert", "tour", "--model", "bert_tiny")
    assert result.returncode == 0, result.stderr
    assert f"backend            {BACKEND}" in result.stdout
    # TensorFlow's C++ start-up lines (oneDNN, CUDA probing) must not reach the user.
    assert "oneDNN" not in result.stderr and "cuda" not in result.stderr.lower()
