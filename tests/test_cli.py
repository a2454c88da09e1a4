"""The `kbert` command: the tour runs on the current backend; bad input exits with one line."""

import json
import re

import pytest

from kbert import cli


def test_tour_prints_shapes_and_parameter_count(capsys):
    assert cli.main(["tour", "--model", "bert_tiny", "--sentence", "Hello, kbert world!"]) == 0
    printed = capsys.readouterr().out
    assert "4,385,920" in printed
    assert "[CLS] hello , kbert world ! [SEP]" in printed
    assert "sequence_output" in printed and "(1, 7, 128)" in printed


# builds a full-size DistilBERT to print its parameter count; every family's tour: tests/test_every_door.py
@pytest.mark.backend_independent
def test_tour_on_a_model_without_segments(capsys):
    cli.main(["tour", "--model", "distilbert_base", "--sentence", "Short."])
    printed = capsys.readouterr().out
    assert "segment_ids" not in printed and "66,362,880" in printed


def test_unknown_model_exits_with_one_line():
    with pytest.raises(SystemExit, match="^kbert: Unknown model 'bert_huge'"):
        cli.main(["tour", "--model", "bert_huge"])


def test_tour_refuses_a_sentence_longer_than_the_positions():
    # Every family's tour runs: tests/test_every_door.py.
    with pytest.raises(SystemExit, match="^kbert: the sentence is longer than bert_tiny's positions.$"):
        cli.main(["tour", "--model", "bert_tiny", "--sentence", "word " * 511])


# --- finetune: a run on a tiny checkpoint, and the bad input that stops it with one line ---


def test_finetune_runs_with_the_options_given(tmp_path, capsys):
    from finetuning_data import check_saved, write_checkpoint, write_task_files

    from kbert.tasks import TextClassifier

    train, validation = write_task_files("classify", tmp_path, pairs=True)
    output = tmp_path / "run"
    assert cli.main(["finetune", "--task", "classify", "--checkpoint", write_checkpoint(tmp_path),
                     "--train", train, "--validation", validation, "--epochs", "1", "--batch-size", "4",
                     "--learning-rate", "0.002", "--sequence-length", "24", "--seed", "3", "--buckets", "off",
                     "--output", str(output)]) == 0
    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    assert (metrics["epochs"], metrics["batch_size"], metrics["learning_rate"], metrics["sequence_length"],
            metrics["buckets"]) == (1, 4, 0.002, 24, False)
    assert all(0 <= metrics[name] <= 1 for name in ("accuracy", "f1")) and -1 <= metrics["matthews_correlation"] <= 1
    rows = check_saved(output, metrics, TextClassifier)
    assert [row["label"] for row in rows] == ["pos", "neg", "pos", "neg"]
    assert "Validation: accuracy" in capsys.readouterr().out


@pytest.mark.backend_independent  # the parser and the options it passes on
def test_finetune_leaves_the_recipe_to_the_run_it_starts(monkeypatch):
    from kbert.jobs import finetuning_run

    seen = []
    monkeypatch.setattr(finetuning_run, "run_bbc_news_comparison",
                        lambda pretrained, output, **options: seen.append(options))
    recipe = {"epochs", "learning_rate", "sequence_length"}
    cli.main(["finetune"])
    cli.main(["finetune", "--epochs", "2", "--learning-rate", "1e-4", "--sequence-length", "64"])
    assert not recipe & set(seen[0])  # the demo's own DEMO_* recipe
    assert {name: seen[1][name] for name in recipe} == {"epochs": 2, "learning_rate": 1e-4, "sequence_length": 64}
    [finetune] = [parser for name, parser in cli._parser()._subparsers._group_actions[0].choices.items()
                  if name == "finetune"]
    demo = {action.dest: re.search(r"demo(?:'s small model)?: ([^)]+)\)", action.help).group(1)
            for action in finetune._actions if action.dest in recipe}  # --help spells the DEMO_* values
    assert {name: float(value) for name, value in demo.items()} == {
        "epochs": finetuning_run.DEMO_EPOCHS, "learning_rate": finetuning_run.DEMO_LEARNING_RATE,
        "sequence_length": finetuning_run.DEMO_SEQUENCE_LENGTH}


def _finetune_error(arguments, capsys):
    """The one line that `kbert finetune arguments` stops with, after checking the exit status 2."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["finetune", *arguments])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("kbert: ") and error.count("\n") == 1
    return error


def _bad_files(case, folder):
    """`(task, train, validation)` files of `finetuning_data` with one flaw, for `case`."""
    from finetuning_data import classification_rows, squad, swag_rows, write_json, write_table, write_task_files

    if case == "unseen label":
        train, validation = write_task_files("classify", folder)
        write_table(validation, [*classification_rows(2), {"text": "the plot", "label": "maybe"}])
        return "classify", train, validation
    if case == "answer not at answer_start":
        train, validation = write_task_files("qa", folder)
        data = squad(4)
        data["data"][0]["paragraphs"][0]["qas"][3]["answers"][0]["answer_start"] = 28
        return "qa", train, write_json(validation, data)
    if case in ("choice counts", "choice counts between files"):
        train, validation = write_task_files("choice", folder)
        rows = swag_rows(4, endings=3 if case == "choice counts between files" else 4)
        rows[2]["ending1"] = ""
        return "choice", train, write_table(validation, rows if case == "choice counts" else rows[:2])
    if case == "empty file":
        train, validation = write_task_files("tag", folder)
        open(train, "w").close()
        return "tag", train, validation
    train, validation = write_task_files("regress", folder, suffix=".jsonl")  # "missing column"
    write_table(validation, [{"text": "the film", "label": 1.0}, {"text": "good film"}])
    return "regress", train, validation


@pytest.mark.parametrize(
    "case, message",
    [
        ("unseen label", "dev.csv, line 4: label 'maybe' was not seen in training"),
        ("answer not at answer_start", "dev.json, question q3: the answer 'france' is not at its answer_start 28"),
        ("choice counts", "dev.csv, line 4: 3 choices where the other rows have 4"),
        ("choice counts between files", "dev.csv, line 1: 3 ending columns where the training file has 4"),
        ("empty file", "train.txt is empty"),
        ("missing column", "dev.jsonl, line 2: no key 'label'"),
    ],
)
def test_finetune_names_the_file_and_row_of_bad_input(case, message, tmp_path, capsys):
    task, train, validation = _bad_files(case, tmp_path)
    error = _finetune_error(["--task", task, "--checkpoint", "bert_tiny", "--train", train,
                             "--validation", validation, "--output", str(tmp_path / "run")], capsys)
    assert str(tmp_path) in error and message in error
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--task", "classify"], "kbert: finetune needs --checkpoint, --train, --validation too"),
        (["--vocabulary", "vocab.txt"], "kbert: finetune needs --task, --checkpoint, --train, --validation too"),
        (["--pretrained", "runs/p", "--checkpoint", "bert_tiny"],
         "kbert: --pretrained is for the BBC News demo, which takes no --checkpoint"),
        (["--task", "tag", "--checkpoint", "bert_tiny", "--train", "{folder}/no.txt", "--validation",
          "{folder}/no.txt"],
         "kbert: --train file not found: {folder}/no.txt"),
        (["--task", "classify", "--checkpoint", "bert_tiny", "--train", "{folder}/file", "--validation",
          "{folder}/file", "--output", "{folder}/file"], "kbert: --output {folder}/file exists and is not a folder"),
        (["--pretrained", "{folder}"],
         "kbert: No pretrained model at {folder}/model.keras: run `kbert pretrain` first"),
        (["--task", "text", "--checkpoint", "t5_small", "--train", "{folder}/text.csv", "--validation",
          "{folder}/text.csv", "--learning-rate", "inf"], "kbert: The learning rate must be positive; received inf"),
        (["--task", "text", "--checkpoint", "bert_tiny", "--train", "{folder}/text.csv", "--validation",
          "{folder}/text.csv"],
         "kbert: --task text fine-tunes a kbert T5; the checkpoint's backbone is kbert.models.Encoder"),
    ],
)
def test_finetune_arguments_that_do_not_fit(arguments, message, tmp_path, capsys):
    (tmp_path / "file").write_text("text,label\n")
    (tmp_path / "text.csv").write_text("source,target\nsentiment: a good film,positive\n")
    arguments = [argument.format(folder=tmp_path) for argument in arguments]
    assert _finetune_error(arguments, capsys).startswith(message.format(folder=tmp_path))


def test_finetune_features_train_only_the_head_on_the_frozen_encoder(tmp_path):
    import keras
    import numpy as np
    from finetuning_data import check_saved, write_checkpoint, write_task_files

    from kbert.tasks import TokenClassifier
    from kbert.tasks.encoder_features import FEATURES

    assert cli.FEATURES == FEATURES  # the parser's copy, spelled without importing Keras
    train, validation = write_task_files("tag", tmp_path)
    checkpoint, output = write_checkpoint(tmp_path), tmp_path / "run"
    assert cli.main(["finetune", "--task", "tag", "--checkpoint", checkpoint, "--train", train,
                     "--validation", validation, "--epochs", "1", "--batch-size", "4", "--learning-rate", "0.01",
                     "--sequence-length", "24", "--features", "scalar_mix", "--output", str(output)]) == 0
    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    assert metrics["features"] == "scalar_mix"
    check_saved(output, metrics, TokenClassifier)
    model = keras.saving.load_model(output / "model.keras")
    assert model.features == "scalar_mix" and len(model.trainable_weights) == 4  # the mix's 2, the head's 2
    pretrained = keras.saving.load_model(checkpoint)
    for before, after in zip(pretrained.weights, model.backbone.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(after), keras.ops.convert_to_numpy(before))
    assert not np.allclose(keras.ops.convert_to_numpy(model.encoder_features.mix.layer_weights), 0.0)


def test_finetune_features_that_do_not_fit(tmp_path, capsys):
    from finetuning_data import write_task_files

    train, validation = write_task_files("tag", tmp_path)
    error = _finetune_error(["--task", "tag", "--checkpoint", "bert_tiny", "--train", train, "--validation",
                             validation, "--batch-size", "4", "--features", "last_four", "--output",
                             str(tmp_path / "run")], capsys)
    assert error.startswith("kbert: features='last_four' concatenates the last 4 layers; the encoder has only "
                            "num_layers=2")
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit):
        cli.main(["finetune", "--task", "tag", "--features", "first_two"])
    assert "invalid choice: 'first_two'" in capsys.readouterr().err
