"""What every `kbert pretrain` run shares, whatever its objective: the optimizer, the
epoch length of its `fit`, the demo size and the files it saves.

`pretraining_run` (the job) and the objectives' modules (`vocabulary_kind`,
`language_model_objectives`, `bilm_objective`, `bart_objective`) import these.

>>> STEPS_PER_EPOCH, DEMO_SENTENCES
(50, 3)
"""

import json
import math
import os

from kbert.checkpoints.checkpoint_loading import tokenizer_beside
from kbert.jobs.learning_curve import save_learning_curve
from kbert.training.optimizers import create_optimizer

# The files `save_run` writes; a run leaves its vocabulary's files besides.
SAVED_FILES = ("model.keras", "metrics.json", "learning_curve.png")
STEPS_PER_EPOCH = 50
HELD_OUT_EVERY = 10
DEMO_SENTENCES = 3


def run_optimizer(steps, learning_rate):
    """The main job's optimizer: AdamW peaking at `learning_rate` after a tenth of the `steps`."""
    return create_optimizer("adamw", learning_rate=learning_rate, total_steps=steps,
                            warmup_steps=max(steps // 10, 1))


def saved_vocabulary(output, learn, documents, vocabulary_size, kind, log):
    """The path of `output/vocab.txt`, first written (one entry a line) if absent.

    `learn(documents, vocabulary_size)` gives the entries; `kind` names them in the log line.
    """
    path = os.path.join(output, "vocab.txt")
    if not os.path.exists(path):
        entries = learn(documents, vocabulary_size)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(entries) + "\n")
        log(f"Learned a {len(entries):,}-{kind} vocabulary (at most {vocabulary_size:,}) "
            f"from {len(documents)} documents.")
    return path


def run_preprocessor(output, sequence_length):
    """A `TextPreprocessor` over the tokenizer files the run wrote to `output`, or `None`.

    ELMo's `vocab.txt` is a word list, no WordPiece vocabulary (its model reads
    characters): a vocabulary without BERT's special tokens gives `None`.
    """
    from kbert.text.text_preprocessor import TextPreprocessor

    try:
        tokenizer = tokenizer_beside(output)
    except ValueError:
        return None
    return None if tokenizer is None else TextPreprocessor(tokenizer, sequence_length)


def _finite(value):
    """`value` with every non-finite float (NaN, infinity) as None, which strict JSON can hold."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def write_metrics(path, metrics):
    """Write `metrics` to `path` as strict JSON: a metric that is not a finite number is `null`.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "metrics.json")
    >>> write_metrics(path, {"pearson": float("nan"), "loss": [0.5, float("inf")]})
    >>> open(path).read().split()
    ['{', '"pearson":', 'null,', '"loss":', '[', '0.5,', 'null', ']', '}']
    """
    with open(path, "w") as f:
        json.dump(_finite(metrics), f, indent=2, allow_nan=False)


def completed_run(run, log):
    """The metrics of the finished run in `run.output` (`run.complete`), which a rerun leaves as it is."""
    log(f"{run.output} holds this run, complete: nothing to do (its metrics.json below; --overwrite trains again).")
    with open(os.path.join(run.output, "metrics.json"), encoding="utf-8") as f:
        return json.load(f)


def save_run(run, model, metrics, title, saved_files, log):
    """Save `model`, the metrics and the learning curve (titled `title`) to `run.output`; end `run`.

    `saved_files` names every file the run leaves (the tokenizer's too), for the log line.
    The model's preprocessor (`run_preprocessor`) is saved inside `model.keras`.
    """
    if getattr(model, "preprocessor", "absent") is None:
        model.preprocessor = run_preprocessor(run.output, run.arguments.get("sequence_length", 128))
    model.save(os.path.join(run.output, "model.keras"))
    write_metrics(os.path.join(run.output, "metrics.json"), metrics)
    save_learning_curve(os.path.join(run.output, "learning_curve.png"), run.losses, title)
    run.finish()
    log(f"Saved {', '.join(saved_files)} to {run.output}")
