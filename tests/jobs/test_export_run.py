"""`kbert export`: each format checked in a fresh process against the Keras model's outputs, on the
backend that produces it (the SavedModel on TensorFlow, to 1e-5, loaded with no kbert imported; ONNX on
PyTorch, in onnxruntime, to 1e-4, at a batch and length other than the export's), and the one-line error
naming that backend on the others.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from finetuning_data import VOCABULARY, write_vocabulary

import kbert
from kbert import cli
from kbert.tasks import TextClassifier

pytest.importorskip("tensorflow_text")

from kbert.text import TextPreprocessor, WordPieceTokenizer  # noqa: E402

TEXTS = ["bob is in paris.", "the good film", "where is alice?"]


@pytest.fixture
def saved(tmp_path):
    """`(model, path)`: a small classifier with its preprocessor, saved as one `.keras` file."""
    write_vocabulary(tmp_path)
    backbone = kbert.models.Encoder(vocabulary_size=len(VOCABULARY), num_layers=1, num_heads=2, hidden_dim=16,
                                    intermediate_dim=32, max_positions=32)
    model = TextClassifier(backbone, 3, preprocessor=TextPreprocessor(
        WordPieceTokenizer(str(tmp_path / "vocab.txt")), 32, labels=["a", "b", "c"]))  # buckets 16 and 32
    path = str(tmp_path / "model.keras")
    model.save(path)
    return model, path


def _fresh(code, *arguments):
    """The JSON printed last by `code` run in a new Python process."""
    output = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True, check=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout
    return json.loads(output.strip().splitlines()[-1])


def _export(arguments, capsys):
    assert cli.main(["export", *arguments]) == 0
    capsys.readouterr()


def _error(arguments, capsys):
    with pytest.raises(SystemExit):
        cli.main(["export", *arguments])
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    return message


SAVED_MODEL = """
import json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
loaded = {path: tf.saved_model.load(path) for path in sys.argv[1].split(",")}  # kept: their variables live on
served = [loaded[path].serve(tf.constant(texts))["logits"].numpy().tolist() for path, texts in json.loads(sys.argv[2])]
print(json.dumps({"logits": served, "kbert": "kbert" in sys.modules}))
"""
# A text longer than 16 tokens: its batch runs in the SavedModel's bucket of 32, the others' in 16.
LONG = "bob is in paris. " * 4

ONNX = """
import json, sys
import numpy as np, onnxruntime
session = onnxruntime.InferenceSession(sys.argv[1])
inputs = {name: np.array(value, np.int64) for name, value in json.loads(sys.argv[2]).items()}
outputs = session.run(None, {i.name: inputs[i.name] for i in session.get_inputs()})
print(json.dumps({"logits": outputs[0].tolist(), "kbert": "kbert" in sys.modules}))
"""


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the SavedModel is made on TensorFlow")
@pytest.mark.slow(reason="exports a SavedModel and reads it in a process without kbert")
def test_the_saved_model_reads_strings_without_kbert(saved, tmp_path, capsys):
    """A classifier and a tagger, each on a batch in either length bucket, against their full-length logits."""
    from kbert.tasks import TokenClassifier

    model, path = saved
    tagger = TokenClassifier(model.backbone, 4, preprocessor=model.preprocessor)
    tagger.save(str(tmp_path / "tagger.keras"))
    for source, folder in ((path, "served"), (str(tmp_path / "tagger.keras"), "tagger")):
        _export(["--model", source, "--format", "saved_model", "--output", str(tmp_path / folder)], capsys)
    batches = [TEXTS, [LONG, *TEXTS]]
    paths = [str(tmp_path / "served"), str(tmp_path / "tagger")]
    result = _fresh(SAVED_MODEL, ",".join(paths), json.dumps([[p, texts] for p in paths for texts in batches]))
    assert not result["kbert"]
    for served, (task, texts) in zip(result["logits"], [(t, b) for t in (model, tagger) for b in batches]):
        inputs = model.preprocessor.encode(texts)
        expected = keras.ops.convert_to_numpy(task(inputs))
        if task is tagger:  # the padding's logits are zeros: compare the texts' tokens
            served, expected = np.asarray(served)[inputs["padding_mask"] == 1], expected[inputs["padding_mask"] == 1]
        np.testing.assert_allclose(served, expected, atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="ONNX is made on PyTorch")
def test_the_onnx_model_runs_in_onnxruntime_at_any_batch_and_length(saved, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    model, path = saved
    _export(["--model", path, "--format", "onnx", "--output", str(tmp_path / "onnx")], capsys)
    for texts, length in ((TEXTS, 16), (TEXTS[:1], 7)):
        model.preprocessor.sequence_length = length
        inputs = model.preprocessor.encode(texts)
        result = _fresh(ONNX, str(tmp_path / "onnx" / "model.onnx"),
                        json.dumps({name: value.tolist() for name, value in inputs.items()}))
        expected = keras.ops.convert_to_numpy(model(inputs))
        np.testing.assert_allclose(result["logits"], expected, atol=1e-4)


def test_a_format_the_backend_cannot_produce_names_the_one_that_can(saved, tmp_path, capsys):
    _, path = saved
    other = {"tensorflow": ("onnx", "torch"), "jax": ("saved_model", "tensorflow"), "torch": ("saved_model",
                                                                                            "tensorflow")}
    format, backend = other[keras.backend.backend()]
    message = _error(["--model", path, "--format", format, "--output", str(tmp_path / "out")], capsys)
    assert f"produced on the {backend} backend" in message and f"--backend {backend}" in message


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="JAX produces no format: the backend is refused first")
def test_an_output_that_is_no_new_folder_gets_one_line(tmp_path, capsys, monkeypatch):
    format = "onnx" if keras.backend.backend() == "torch" else "saved_model"
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "model.onnx").write_text("x")
    for output, message in ((tmp_path / "file", "is a file"), (tmp_path / "file" / "under", "cannot be made"),
                            ("/proc/kbert-export", "cannot be made"), (tmp_path / "full", "is not empty")):
        error = _error(["--model", str(tmp_path / "model.keras"), "--format", format, "--output", str(output)],
                       capsys)
        assert f"--output {output} {message}" in error
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a folder this process may not write (root may)
    error = _error(["--model", str(tmp_path / "model.keras"), "--format", format, "--output", str(tmp_path / "new")],
                   capsys)
    assert f"--output {tmp_path / 'new'} is not writable." in error
