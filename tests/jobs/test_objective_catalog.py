"""The objectives of `kbert pretrain`: one complete record each, the pairs of models and objectives, a record more."""

import dataclasses
import json

import pytest

from kbert import cli
from kbert.jobs.objective_catalog import OBJECTIVES
from kbert.jobs.pretraining_objective import PretrainingObjective
from kbert.jobs.pretraining_report import PretrainingReport
from kbert.jobs.pretraining_run import default_corpus, run_pretraining
from kbert.jobs.vocabulary_kind import BYTE_LEVEL_BPE, SENTENCE_PIECE, WORD_PIECE, WORDS
from kbert.models import presets
from kbert.pretraining.t5_objective import T5_OBJECTIVES


def test_every_objective_is_a_complete_record():
    assert list(OBJECTIVES) == ["mlm_nsp", "mlm", "sop", "span", "electra", "structbert", "plm", "clm", "bilm",
                                "bart", "span_corruption", "prefix_lm", "bert_style", "deshuffle", "mass",
                                "drop_tokens"]
    for objective in OBJECTIVES.values():
        assert isinstance(objective, PretrainingObjective) and isinstance(objective.report, PretrainingReport)
        assert all(callable(getattr(objective, name)) for name in ("model", "pretrainer", "data"))
        assert all(callable(getattr(objective.report, name)) for name in ("evaluate", "title", "demo"))
        assert objective.default_model in objective.models
        assert objective.outputs[-3:] == ("model.keras", "metrics.json", "learning_curve.png")
    kinds = {name: objective.vocabulary for name, objective in OBJECTIVES.items()}
    assert kinds == {**dict.fromkeys(OBJECTIVES, WORD_PIECE), "bilm": WORDS, "bart": BYTE_LEVEL_BPE,
                     **dict.fromkeys(T5_OBJECTIVES, SENTENCE_PIECE)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        OBJECTIVES["mlm"].default_model = "bert_base"


def test_the_command_names_every_objective():
    assert list(cli.OBJECTIVES) == list(OBJECTIVES)  # the parser's copy, spelled without importing Keras


def test_every_model_family_is_pretrained_by_some_objective():
    tables = [presets.PRESETS, presets.T5_PRESETS, presets.GPT2_PRESETS, presets.ELMO_PRESETS, presets.BART_PRESETS,
              presets.XLNET_PRESETS]
    assert all(any(objective.models is table for objective in OBJECTIVES.values()) for table in tables)
    assert {name for name, o in OBJECTIVES.items() if o.models is presets.T5_PRESETS} == set(T5_OBJECTIVES)


@pytest.mark.backend_independent  # refused before any computation
@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_a_model_the_objective_does_not_train_is_refused_before_the_run_starts(objective, tmp_path):
    others = {o.default_model for o in OBJECTIVES.values() if o.models is not OBJECTIVES[objective].models}
    for model in sorted(others):
        with pytest.raises(ValueError) as error:
            run_pretraining(model=model, objective=objective, output=str(tmp_path / "run"))
        message = str(error.value)
        assert model in message and objective in message and "\n" not in message, message
    assert not (tmp_path / "run").exists()


def test_a_model_of_a_single_objective_is_refused_in_its_words():
    with pytest.raises(ValueError, match=r"^--objective bart trains the BART models \(bart_tiny, bart_base, "
                                         r"bart_large\) and they train with it alone; received --model "
                                         r"bart_tiny --objective mlm \(for example --model bart_tiny"):
        run_pretraining(model="bart_tiny", objective="mlm")


@pytest.mark.backend_independent  # a catalog record
def test_a_record_more_is_an_objective_more(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(OBJECTIVES, "masked_copy", OBJECTIVES["mlm"])
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n\n".join(default_corpus()[:20]), encoding="utf-8")
    output = tmp_path / "run"
    cli.main(["pretrain", "--objective", "masked_copy", "--corpus", str(corpus), "--output", str(output),
              "--steps", "1", "--batch-size", "2", "--sequence-length", "16", "--vocabulary-size", "300"])
    metrics = json.loads((output / "metrics.json").read_text())
    assert (metrics["objective"], metrics["model"], metrics["steps"]) == ("masked_copy", "bert_tiny", 1)
    assert "held_out_mlm_accuracy" in metrics and "Fill in the blank" in capsys.readouterr().out
