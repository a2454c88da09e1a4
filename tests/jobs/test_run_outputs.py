"""What every `kbert pretrain` run shares: its optimizer, its vocab.txt and the files it saves."""

import json
import types

import keras
import numpy as np

from kbert.pretraining import AdamW
from kbert.jobs.run_outputs import run_optimizer, save_run, saved_vocabulary


def test_the_optimizer_is_adamw_peaking_after_a_tenth_of_the_steps():
    optimizer = run_optimizer(steps=200, learning_rate=1e-3)
    assert isinstance(optimizer, AdamW)
    rates = []
    for step in (0, 20, 200):
        optimizer.iterations.assign(step)
        rates.append(float(keras.ops.convert_to_numpy(optimizer.learning_rate)))
    np.testing.assert_allclose(rates, [0.0, 1e-3, 0.0], atol=1e-9)


def test_the_vocabulary_is_learned_once_then_read_from_the_file(tmp_path):
    calls, lines = [], []

    def learn(documents, size):
        calls.append((documents, size))
        return ["[PAD]", "a", "b"]

    for _ in range(2):
        path = saved_vocabulary(str(tmp_path), learn, ["a b", "b"], 10, "word", lines.append)
    assert calls == [(["a b", "b"], 10)]
    assert open(path, encoding="utf-8").read() == "[PAD]\na\nb\n"
    assert lines == ["Learned a 3-word vocabulary (at most 10) from 2 documents."]


def test_a_run_saves_its_model_metrics_and_curve_then_finishes(tmp_path):
    finished = []
    run = types.SimpleNamespace(output=str(tmp_path), losses=[3.0, 2.0, 1.5],
                                finish=lambda: finished.append(True))
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    lines = []
    save_run(run, model, {"accuracy": 0.5}, "a run", ("model.keras", "metrics.json"), lines.append)
    assert json.loads((tmp_path / "metrics.json").read_text()) == {"accuracy": 0.5}
    assert (tmp_path / "model.keras").exists() and (tmp_path / "learning_curve.png").exists()
    assert finished == [True] and lines == [f"Saved model.keras, metrics.json to {tmp_path}"]
