"""`kbert pretrain` for T5: a short span-corruption run through the command, fine-tuned and asked; an exact
resume after Ctrl-C; every T5 objective's run; bad input."""

import contextlib
import io
import json
import os
import signal

import keras
import numpy as np
import pytest

from kbert import cli
from kbert.jobs.objective_catalog import OBJECTIVES
from kbert.jobs.pretraining_run import run_pretraining
from kbert.jobs.run_outputs import DEMO_SENTENCES
from kbert.models import T5
from kbert.pretraining.t5_objective import T5_OBJECTIVES
from kbert.tasks import Seq2SeqLM

pytest.importorskip("sentencepiece")
SMALL = dict(model="t5_tiny", batch_size=4, sequence_length=32, vocabulary_size=400)


@pytest.fixture(scope="module")
def span_run(corpus, tmp_path_factory):
    """`(output folder, printed lines)` of a 3-step span-corruption run through the command."""
    output = tmp_path_factory.mktemp("span") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        cli.main(["pretrain", "--objective", "span_corruption", "--corpus", corpus, "--steps", "3",
                  *(f"--{name.replace('_', '-')}={value}" for name, value in SMALL.items()), "--output", str(output)])
    return output, printed.getvalue()


# the job's files and demo (its fixture serves the tests here that run once); T5's training on every backend:
# tests/tasks/test_seq2seq_lm.py, every-door
@pytest.mark.backend_independent
@pytest.mark.slow(reason="a whole kbert pretrain run of T5 (SentencePiece learned, steps, demo, save)")
def test_a_span_corruption_run_through_the_command(span_run):
    output, printed = span_run
    assert sorted(os.listdir(output)) == sorted([*OBJECTIVES["span_corruption"].outputs, "run.json"])
    metrics = json.loads((output / "metrics.json").read_text())
    assert (metrics["objective"], metrics["model"], metrics["vocabulary_size"]) == ("span_corruption", "t5_tiny", 400)
    assert np.isfinite(metrics["held_out_loss"])
    assert 0.0 <= metrics["held_out_token_accuracy"] <= 1.0 and 0.0 < metrics["most_frequent_token_accuracy"] < 1
    assert printed.count("  input:  ") == printed.count("  model:  ") == DEMO_SENTENCES
    assert printed.count("<extra_id_0>") >= 2 * DEMO_SENTENCES  # in every input and every target
    lm = keras.saving.load_model(output / "model.keras")
    assert isinstance(lm, Seq2SeqLM) and isinstance(lm.backbone, T5) and lm.backbone.dropout == 0.0
    assert lm.backbone.vocabulary_size == 400 and lm.backbone.num_layers == 2


@pytest.mark.backend_independent  # fine-tuning and predicting a T5 on each backend: tests/test_every_door.py
def test_the_run_s_model_fine_tunes_on_text_to_text_and_answers_predict(span_run, tmp_path, capsys):
    output, _ = span_run
    rows = [{"source": "topic: shares rose", "target": "business"}, {"source": "topic: a goal", "target": "sport"}]
    (tmp_path / "pairs.jsonl").write_text("\n".join(json.dumps(row) for row in rows * 4), encoding="utf-8")
    pairs = str(tmp_path / "pairs.jsonl")
    cli.main(["finetune", "--task", "text", "--checkpoint", str(output / "model.keras"), "--train", pairs,
              "--validation", pairs, "--epochs", "1", "--batch-size", "4", "--sequence-length", "16",
              "--output", str(tmp_path / "text")])
    assert "exact" in json.loads((tmp_path / "text" / "metrics.json").read_text())
    capsys.readouterr()
    cli.main(["predict", "--model", str(tmp_path / "text"), "--text", "topic: shares fell", "--max-new-tokens", "3"])
    assert isinstance(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["generated"], str)


RESUMED = dict(SMALL, objective="deshuffle", steps=8, save_every=3)


class InterruptAtStep(keras.callbacks.Callback):
    """Ctrl-C (SIGINT) to this process after `step` training steps."""

    def __init__(self, step):
        super().__init__()
        self.step, self.done = step, 0

    def on_train_batch_end(self, batch, logs=None):
        self.done += 1
        if self.done == self.step:
            os.kill(os.getpid(), signal.SIGINT)


# ResumableRun's exact resume is checked on every backend (tests/test_resumable_run.py, test_pretraining_run.py);
# what is T5's own here is its seeded, reshuffled tf.data stream, the same on every backend.
@pytest.mark.backend_independent
def test_an_interrupted_run_resumes_and_ends_as_an_uninterrupted_one(corpus, tmp_path, ctrl_c_raises):
    expected = run_pretraining(corpus=[corpus], output=str(tmp_path / "whole"), log=lambda line: None, **RESUMED)
    run = dict(corpus=[corpus], output=str(tmp_path / "parts"), **RESUMED)
    with pytest.raises(KeyboardInterrupt):
        run_pretraining(callbacks=[InterruptAtStep(5)], log=lambda line: None, **run)
    with np.load(tmp_path / "parts" / "resume_state.npz") as saved:
        step = json.loads(str(saved["state"]))["step"]
    assert 5 <= step < RESUMED["steps"]  # saved on the signal, past the last periodic checkpoint (3)
    lines = []
    metrics = run_pretraining(log=lines.append, **run)  # the same command again
    assert f"Resuming from the saved state at step {step} of {RESUMED['steps']}." in lines
    numbers = [name for name, value in expected.items() if isinstance(value, float) and name != "wall_time_seconds"]
    assert {name: metrics[name] for name in numbers} == pytest.approx({name: expected[name] for name in numbers},
                                                                      abs=1e-6, rel=0)
    assert metrics["most_frequent_token"] == expected["most_frequent_token"]


@pytest.mark.backend_independent  # the objectives differ in their tf.data maps; the training is the run's
@pytest.mark.parametrize("objective", [o for o in T5_OBJECTIVES if o not in ("span_corruption", "deshuffle")])
def test_every_t5_objective_trains_the_t5_models(objective, corpus, tmp_path):
    lines = []
    metrics = run_pretraining(corpus=[corpus], output=str(tmp_path), objective=objective, steps=2,
                              log=lines.append, **SMALL)
    assert metrics["objective"] == objective and np.isfinite(metrics["held_out_loss"])
    assert sum(line.startswith("  target: ") for line in lines) == DEMO_SENTENCES


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--model", "bert_tiny"], "kbert: --objective mlm_nsp trains the encoders"),
        (["--model", "t5_tiny", "--vocabulary-size", "100"],
         "kbert: A T5 vocabulary holds 100 sentinels and at least 8 pieces: --vocabulary-size must be at least 108; "
         "received 100."),
        (["--model", "t5_tiny", "--vocabulary-size", "400", "--batch-size", "4096"],
         "kbert: The held-out documents (every 10th) fill no batch of 4096 x 64"),
    ],
)
def test_bad_input_stops_with_one_line(arguments, message, corpus, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["pretrain", "--objective", "span_corruption", "--corpus", corpus, "--output",
                  str(tmp_path / "run"), *arguments])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(message) and error.count("\n") == 1
