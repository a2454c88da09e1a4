"""`kbert pretrain --objective bart`: a short run end to end through the command, and its bad input."""

import json
import os

import keras
import numpy as np
import pytest

from kbert import cli
from kbert.models import BART
from kbert.jobs.objective_catalog import OBJECTIVES
from kbert.jobs.pretraining_run import default_corpus
from kbert.jobs.run_outputs import DEMO_SENTENCES

pytest.importorskip("keras_hub")
pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Sixty documents of the default corpus, one file, documents separated by blank lines."""
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n\n".join(default_corpus()[:60]), encoding="utf-8")
    return str(path)


@pytest.mark.backend_independent  # the command and BART's data; BART trains on every backend in tests/pretraining
@pytest.mark.slow(reason="a whole kbert pretrain run of BART's denoising")
def test_short_bart_run_through_the_command(corpus, tmp_path, capsys):
    output = tmp_path / "run"
    cli.main(["pretrain", "--objective", "bart", "--model", "bart_tiny", "--corpus", corpus,
              "--steps", "3", "--batch-size", "4", "--sequence-length", "32",
              "--vocabulary-size", "600", "--output", str(output)])
    printed = capsys.readouterr().out
    assert sorted(os.listdir(output)) == sorted([*OBJECTIVES["bart"].outputs, "run.json"])
    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    assert (metrics["objective"], metrics["model"], metrics["vocabulary_size"]) == ("bart", "bart_tiny", 600)
    assert np.isfinite(metrics["held_out_denoising_loss"])
    assert 0.0 <= metrics["held_out_token_accuracy"] <= 1.0
    assert printed.count("  noised:   ") == DEMO_SENTENCES
    assert "<mask>" in printed
    lm = keras.saving.load_model(output / "model.keras")
    assert isinstance(lm.backbone, BART) and lm.backbone.dropout == 0.0
    assert lm.backbone.vocabulary_size == 600


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--model", "bert_tiny"], "kbert: The bart objective pretrains a BART; bert_tiny is not one"),
        (["--model", "bart_tiny", "--sequence-length", "2000"], "kbert: Sequence length 2000 is outside [8, 1024]"),
    ],
)
def test_bad_input_stops_with_one_line(arguments, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["pretrain", "--objective", "bart", "--output", str(tmp_path / "run"), *arguments])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(message) and error.count("\n") == 1
