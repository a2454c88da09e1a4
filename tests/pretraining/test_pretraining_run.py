"""The main job: a short run of every kind end to end, resume after an interruption, bad input."""

import json
import os

import keras
import numpy as np
import pytest

from kbert import cli
from kbert.pretraining import pretraining_run
from kbert.pretraining.pretraining_run import default_corpus, run_pretraining

SMALL = dict(model="bert_tiny", batch_size=4, sequence_length=32, vocabulary_size=1000)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Forty documents of the default corpus, one file, documents separated by blank lines."""
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n\n".join(default_corpus()[:40]), encoding="utf-8")
    return str(path)


def test_default_corpus_is_real_text():
    documents = default_corpus()
    assert len(documents) > 500
    words = sum(len(d.split()) for d in documents)
    assert words > 250_000
    assert not any(line.startswith(">>>") for d in documents for line in d.splitlines())


@pytest.mark.parametrize("objective", ["mlm_nsp", "span", "electra"])
def test_short_run_evaluates_saves_and_demos(objective, corpus, tmp_path):
    lines = []
    metrics = run_pretraining(corpus=[corpus], output=str(tmp_path), objective=objective,
                              steps=3, log=lines.append, **SMALL)
    assert sorted(os.listdir(tmp_path)) == ["metrics.json", "model.keras", "vocab.txt"]
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == metrics
    assert metrics["backend"] == keras.backend.backend()
    assert np.isfinite(metrics["held_out_mlm_loss"])
    assert 0.0 <= metrics["held_out_mlm_accuracy"] <= 1.0
    assert 0.0 < metrics["most_frequent_token_accuracy"] < 1.0
    assert sum(line.startswith("    answer: ") for line in lines) == pretraining_run.DEMO_SENTENCES
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    assert reloaded.count_params() > 0


def test_training_beats_the_frequency_baseline(corpus, tmp_path):
    run = {**SMALL, "batch_size": 16}
    metrics = run_pretraining(corpus=[corpus], output=str(tmp_path), steps=150,
                              learning_rate=2e-3, log=lambda line: None, **run)
    assert metrics["held_out_mlm_accuracy"] > metrics["most_frequent_token_accuracy"]


class _Interrupt(keras.callbacks.Callback):
    """Records the epochs it sees; raises at the start of `at_epoch` once."""

    def __init__(self, at_epoch=None):
        super().__init__()
        self.at_epoch, self.epochs = at_epoch, []

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.at_epoch:
            raise KeyboardInterrupt
        self.epochs.append(epoch)


def test_interrupted_run_resumes_from_its_last_epoch(corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(pretraining_run, "STEPS_PER_EPOCH", 2)
    run = dict(corpus=[corpus], output=str(tmp_path), steps=6, log=lambda line: None, **SMALL)
    first = _Interrupt(at_epoch=2)
    with pytest.raises(KeyboardInterrupt):
        run_pretraining(callbacks=[first], **run)
    assert first.epochs == [0, 1]
    assert os.path.isdir(tmp_path / "backup")
    second = _Interrupt()
    run_pretraining(callbacks=[second], **run)
    assert second.epochs == [2]
    assert not os.path.exists(tmp_path / "backup")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--corpus", "no/such/file.txt"], "kbert: Corpus file or folder not found: 'no/such/file.txt'"),
        (["--corpus", "{empty}"], "kbert: The corpus is empty"),
        (["--sequence-length", "1024"], "kbert: Sequence length 1024 exceeds the 512 positions"),
        (["--objective", "mlm_sop"], "kbert: Unknown objective 'mlm_sop'"),
        (["--model", "bert_huge"], "kbert: Unknown model 'bert_huge'"),
        (["--model", "t5_small"], "kbert: kbert pretrain trains encoders; t5_small is an encoder-decoder"),
    ],
)
def test_bad_input_stops_with_one_line(arguments, message, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    arguments = [str(empty) if a == "{empty}" else a for a in arguments]
    with pytest.raises(SystemExit) as stop:
        cli.main(["pretrain", "--output", str(tmp_path / "run"), *arguments])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(message) and error.count("\n") == 1
