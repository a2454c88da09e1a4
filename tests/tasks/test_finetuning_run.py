"""`kbert finetune`'s job end to end on a tiny encoder: every task and file format, resume, the BBC demo's guard.

Each run is one short epoch at 24 tokens on files of `finetuning_data`; the
checkpoint is a one-layer, 16-wide BERT saved as `model.keras` with its
`vocab.txt` beside it, as `kbert pretrain` leaves one.
"""

import os

import keras
import numpy as np
import pytest
from finetuning_data import check_saved, write_checkpoint, write_task_files

from kbert.tasks import MultipleChoice, SpanQuestionAnswering, TextClassifier, TokenClassifier
from kbert.tasks.finetuning_run import run_bbc_news_comparison, run_finetuning

RUN = dict(epochs=1, batch_size=4, learning_rate=1e-3, sequence_length=24, log=lambda line: None)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("checkpoint"))


# task, file options, model class, metric -> its range. The resume test runs `classify` on JSONL with
# three classes, tests/test_cli.py on CSV with text pairs.
CASES = {
    "regress_tsv": ("regress", {"suffix": ".tsv"}, TextClassifier,
                    {"pearson": (-1, 1), "spearman": (-1, 1), "mean_squared_error": (0, np.inf)}),
    "tag": ("tag", {}, TokenClassifier, {"precision": (0, 1), "recall": (0, 1), "f1": (0, 1)}),
    "qa_squad_1": ("qa", {}, SpanQuestionAnswering, {"exact": (0, 100), "f1": (0, 100), "HasAns_f1": (0, 100)}),
    "qa_squad_2": ("qa", {"version": "2.0"}, SpanQuestionAnswering,
                   {"exact": (0, 100), "f1": (0, 100), "HasAns_exact": (0, 100), "HasAns_f1": (0, 100),
                    "NoAns_exact": (0, 100), "no_answer_threshold": (-np.inf, np.inf)}),
    "choice": ("choice", {}, MultipleChoice, {"accuracy": (0, 1)}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_task_fine_tunes_scores_and_saves(case, checkpoint, tmp_path):
    task, options, model_class, ranges = CASES[case]
    train, validation = write_task_files(task, tmp_path, **options)
    metrics = run_finetuning(task, checkpoint, train, validation, output=str(tmp_path / "run"), **RUN)
    assert metrics["task"] == task and metrics["train_examples"] >= 8
    for name, (low, high) in ranges.items():  # correlations are NaN if the predictions are constant
        value = metrics[name]
        assert low <= value <= high or (name in ("pearson", "spearman") and np.isnan(value)), (name, value)
    rows = check_saved(tmp_path / "run", metrics, model_class)
    questions = metrics.get("total", metrics["validation_examples"])
    assert len(rows) == questions


class _Interrupt(keras.callbacks.Callback):
    """Records the epochs it starts; raises at the start of `at_epoch`."""

    def __init__(self, at_epoch=None):
        super().__init__()
        self.at_epoch, self.epochs = at_epoch, []

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.at_epoch:
            raise KeyboardInterrupt
        self.epochs.append(epoch)


def test_an_interrupted_run_resumes_from_its_backup(checkpoint, tmp_path):
    train, validation = write_task_files("classify", tmp_path, suffix=".jsonl", classes=3)
    run = dict(RUN, epochs=2, output=str(tmp_path / "run"))
    first = _Interrupt(at_epoch=1)
    with pytest.raises(KeyboardInterrupt):
        run_finetuning("classify", checkpoint, train, validation, callbacks=[first], **run)
    assert first.epochs == [0] and os.listdir(tmp_path / "run" / "backup")
    second = _Interrupt()
    metrics = run_finetuning("classify", checkpoint, train, validation, callbacks=[second], **run)
    assert second.epochs == [1]
    rows = check_saved(tmp_path / "run", metrics, TextClassifier)  # the backup is gone
    assert {row["label"] for row in rows} == {"0", "1", "2"} and len(rows) == 4
    assert 0 <= metrics["accuracy"] <= 1 and 0 <= metrics["macro_f1"] <= 1


def test_a_run_too_long_for_the_model_stops_before_training(checkpoint, tmp_path):
    train, validation = write_task_files("classify", tmp_path)
    with pytest.raises(ValueError, match="Sequence length 64 exceeds the model's 32 positions"):
        run_finetuning("classify", checkpoint, train, validation, output=str(tmp_path / "run"),
                       **dict(RUN, sequence_length=64))
    assert not os.path.exists(tmp_path / "run")


def test_the_bbc_news_demo_needs_a_pretrained_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="No pretrained model at .*model.keras: run `kbert pretrain` first"):
        run_bbc_news_comparison(pretrained=str(tmp_path / "pretrain"), output=str(tmp_path / "run"), **RUN)
