"""`kbert pretrain --objective bilm`: a tiny ELMo run end to end, and the model/objective pairs refused."""

import json
import math
import os

import keras
import pytest

from kbert import cli
from kbert.models import ELMo
from kbert.pretraining import BiLMPretrainer
from kbert.jobs.pretraining_run import default_corpus
from kbert.jobs.run_outputs import DEMO_SENTENCES


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n\n".join(default_corpus()[:30]), encoding="utf-8")
    return str(path)


# the job's files and demo; BiLM training on every backend: tests/pretraining/test_bilm_pretrainer.py
@pytest.mark.backend_independent
@pytest.mark.slow(reason="a whole ELMo pretraining run")
def test_a_tiny_bilm_run_evaluates_saves_and_demos(corpus, tmp_path, capsys):
    output = tmp_path / "run"
    assert cli.main(["pretrain", "--objective", "bilm", "--model", "elmo_small", "--corpus", corpus,
                     "--steps", "3", "--batch-size", "4", "--sequence-length", "12",
                     "--vocabulary-size", "500", "--output", str(output)]) == 0
    assert sorted(os.listdir(output)) == ["learning_curve.png", "metrics.json", "model.keras", "run.json", "vocab.txt"]
    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    assert (metrics["model"], metrics["objective"], metrics["steps"], metrics["vocabulary_size"]) == (
        "elmo_small", "bilm", 3, 500)
    for name in ("held_out_forward_perplexity", "held_out_backward_perplexity", "unigram_perplexity"):
        assert math.isfinite(metrics[name]) and 1.0 < metrics[name] < 10 * 500, (name, metrics[name])
    vocabulary = (output / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocabulary[:4] == ["[PAD]", "[UNK]", "<S>", "</S>"] and len(vocabulary) == 500
    printed = capsys.readouterr().out
    assert "Held-out perplexity: forward" in printed
    assert printed.count("    answer: ") == DEMO_SENTENCES
    reloaded = keras.saving.load_model(output / "model.keras")
    assert isinstance(reloaded, BiLMPretrainer) and isinstance(reloaded.backbone, ELMo)
    assert reloaded.backbone.dropout == 0.0 and reloaded.vocabulary_size == 500


@pytest.mark.parametrize("arguments", [["--objective", "bilm"], ["--model", "elmo_small", "--objective", "mlm"]])
def test_elmo_and_bilm_go_together(arguments, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["pretrain", "--output", str(tmp_path / "run"), *arguments])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("kbert: --objective bilm trains the ELMo models (elmo_original, elmo_small)")
    assert error.count("\n") == 1
