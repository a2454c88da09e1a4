"""`import kbert` stays light and quiet: no TensorFlow under JAX/PyTorch, no TF log noise."""

import os
import re
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
def test_import_and_use_without_tensorflow_then_start_it_quietly_for_text():
    result = run_python(
        "import sys, numpy as np, kbert\n"
        "model = kbert.models.bert_tiny()\n"
        "model({'token_ids': np.ones((1, 4), 'int32'), 'segment_ids': np.zeros((1, 4), 'int32'),"
        " 'padding_mask': np.ones((1, 4), 'int32')})\n"
        "print('tensorflow' in sys.modules)\n"
        # The first TensorFlow work (a vocabulary) starts it: on the host only, its device probing kept quiet.
        "kbert.text.learn_word_piece_vocabulary(['a few words', 'a few more words'], 40)\n"
        "import tensorflow as tf\n"
        "print([device.device_type for device in tf.config.get_visible_devices()])\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "['CPU']"]
    assert "oneDNN" not in result.stderr and "cuda" not in result.stderr.lower(), result.stderr


def test_python_dash_m_kbert_runs_quietly():
    result = run_python(None, "-m", "kbert", "tour", "--model", "bert_tiny")
    assert result.returncode == 0, result.stderr
    assert re.search(rf"^backend +{BACKEND}$", result.stdout, re.M)
    # TensorFlow's C++ start-up lines (oneDNN, CUDA probing) must not reach the user.
    assert "oneDNN" not in result.stderr and "cuda" not in result.stderr.lower()


@pytest.mark.slow(reason="a fresh process runs the main job's first steps")
def test_the_main_job_keeps_tensorflow_quiet_when_it_seeds_and_reads_text(tmp_path, corpus):
    # Seeding imports TensorFlow (to seed it) on every backend; a vocabulary this small then stops the run.
    result = run_python(None, "-m", "kbert", "pretrain", "--corpus", corpus, "--vocabulary-size", "5",
                        "--output", str(tmp_path / "run"))
    assert result.returncode == 2
    assert result.stderr.startswith("kbert: `vocabulary_size`=5 is too small") and result.stderr.count("\n") == 1


def test_import_kbert_registers_pretrainers_and_tasks_for_load_model(tmp_path):
    import numpy as np

    import kbert

    backbone = kbert.models.bert_tiny(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    inputs = {
        "token_ids": np.array([[2, 5, 7, 3]], "int32"),
        "segment_ids": np.zeros((1, 4), "int32"),
        "padding_mask": np.ones((1, 4), "int32"),
    }
    models = {
        "pretrainer": kbert.pretraining.BertPretrainer(backbone),
        "classifier": kbert.tasks.TextClassifier(backbone, num_classes=3),
    }
    for name, model in models.items():
        model.save(tmp_path / f"{name}.keras")
    expected = models["classifier"].predict(inputs, verbose=0)
    np.save(tmp_path / "inputs.npy", inputs["token_ids"])
    # A fresh interpreter that only imports kbert: the classes must be registered by it.
    result = run_python(
        "import sys, keras, numpy as np, kbert\n"
        f"folder = {str(tmp_path)!r}\n"
        "for name in ('pretrainer', 'classifier'):\n"
        "    model = keras.saving.load_model(f'{folder}/{name}.keras')\n"
        "    print(type(model).__name__)\n"
        "ids = np.load(f'{folder}/inputs.npy')\n"
        "out = model.predict({'token_ids': ids, 'segment_ids': np.zeros_like(ids),"
        " 'padding_mask': np.ones_like(ids)}, verbose=0)\n"
        "np.save(f'{folder}/outputs.npy', np.asarray(out))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["BertPretrainer", "TextClassifier"]
    np.testing.assert_allclose(np.load(tmp_path / "outputs.npy"), np.asarray(expected), atol=1e-6)
