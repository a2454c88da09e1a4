"""`kbert export --format huggingface`: the folder a `kbert finetune` run left, written out and read by
transformers' `pipeline`, gives `kbert predict`'s labels and scores; each format's optional packages are
checked before any work, naming the `export` extra."""

import json
import os
import sys

import numpy as np
import pytest
from finetuning_data import VOCABULARY, write_task_files, write_vocabulary

import kbert
from kbert import cli
from kbert.jobs.export_run import run_export
from kbert.jobs.predict_run import load_predictor, predict_batch

pytest.importorskip("tensorflow_text")
transformers = pytest.importorskip("transformers")
TEXTS = ["the film was good", "it was awful", "where is bob?"]


def _main(arguments, capsys):
    assert cli.main(arguments) == 0
    return capsys.readouterr().out


@pytest.mark.backend_independent
def test_pipeline_on_the_exported_finetune_run_gives_kbert_predict_results(tmp_path, capsys):
    write_vocabulary(tmp_path)
    backbone = kbert.models.build("bert_tiny", num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
                                  vocabulary_size=len(VOCABULARY), max_positions=32, normalize_first=True)
    backbone.save(str(tmp_path / "model.keras"))  # the main job's pre-LN encoder, as `kbert pretrain` leaves it
    train, validation = write_task_files("classify", tmp_path)
    _main(["finetune", "--task", "classify", "--checkpoint", str(tmp_path / "model.keras"), "--train", train,
           "--validation", validation, "--epochs", "1", "--batch-size", "4", "--sequence-length", "16",
           "--output", str(tmp_path / "run")], capsys)
    output = str(tmp_path / "exported")
    assert "as huggingface" in _main(["export", "--model", str(tmp_path / "run"), "--format", "huggingface",
                                      "--output", output], capsys)
    assert sorted(os.listdir(output)) == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    with open(os.path.join(output, "config.json")) as f:
        assert json.load(f)["architectures"] == ["RobertaPreLayerNormForSequenceClassification"]
    classify = transformers.pipeline("text-classification", model=output, top_k=None)
    model = load_predictor(str(tmp_path / "run"))
    for ours, theirs in zip(predict_batch(model, [{"text": text} for text in TEXTS]), classify(TEXTS)):
        assert ours["label"] == theirs[0]["label"]
        got = {result["label"]: result["score"] for result in theirs}
        assert got.keys() == ours["scores"].keys()
        np.testing.assert_allclose([got[label] for label in ours["scores"]], list(ours["scores"].values()),
                                   atol=1e-4)


@pytest.mark.backend_independent
@pytest.mark.parametrize("format, module", [("onnx", "onnx"), ("huggingface", "safetensors")])
def test_a_missing_export_package_is_named_before_any_work(format, module, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # as where the `export` extra is not installed
    with pytest.raises(ValueError, match=rf"--format {format} needs {module}.*kbert\[export\]"):
        run_export(str(tmp_path / "no-model-read"), format, str(tmp_path / "out"))
