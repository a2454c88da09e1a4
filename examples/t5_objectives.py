"""The T5 paper's pretraining objectives at equal compute, each fine-tuned on BBC News topics as text to text.

    KERAS_BACKEND=jax python examples/t5_objectives.py [--steps 600] [--batch-size 16] [--sequence-length 64]
        [--finetune-epochs 3] [--seeds 1] [--output runs/t5_objectives] [--results examples/results/t5_objectives.md]
        [--smoke]

1. Learns a SentencePiece vocabulary with T5's 100 sentinels from the BBC
   News training articles (`kbert.jobs.bbc_news`; no validation article).
2. Pretrains one `t5_tiny` (no dropout) per objective of `kbert.pretraining.T5Objective`
   (prefix LM, BERT-style, deshuffling, MASS-style, span corruption, drop
   tokens) on those articles, at equal training FLOPs: span corruption takes
   `--steps` steps and each other objective the steps its cost per step
   allows (`training_flops`, docs/algorithms.md §22's rule for an
   encoder-decoder).
3. Fine-tunes each, and the same T5 from scratch, on the topics as text to
   text ("topic: <article>" -> "business"; `kbert.jobs.finetuning_run.finetune`,
   `--task text`'s recipe) and scores the exact match of the generated topic
   on the validation articles.
4. Prints the table beside the T5 paper's GLUE averages (its Tables 5 and 6,
   at 2^35 tokens of C4 with T5-Base) and writes it to `--results`.

`--smoke` runs every step at a toy size (two of the objectives, 2 pretraining
steps, one epoch over 40 articles): a check that the script works, not a result.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from kbert.jobs.bbc_news import read_bbc_news  # noqa: E402
from kbert.jobs.finetuning_run import finetune  # noqa: E402
from kbert.jobs.objective_catalog import OBJECTIVES  # noqa: E402
from kbert.jobs.run_outputs import run_optimizer  # noqa: E402
from kbert.jobs.t5_objectives import t5_data, t5_objective  # noqa: E402
from kbert.jobs.task_examples import TaskExamples  # noqa: E402
from kbert.jobs.vocabulary_kind import SENTENCE_PIECE  # noqa: E402
from kbert.backend.imports import set_random_seed  # noqa: E402
from kbert.pretraining import T5_OBJECTIVES  # noqa: E402

# The T5 paper's GLUE averages (Table 5: prefix LM, BERT-style, deshuffling; Table 6: the BERT-style variants).
PAPER_GLUE = {"prefix_lm": 80.69, "bert_style": 82.96, "deshuffle": 73.17, "mass": 82.32,
              "span_corruption": 83.28, "drop_tokens": 84.44}
PAPER_NAMES = {"prefix_lm": "prefix LM", "bert_style": "BERT-style", "deshuffle": "deshuffling",
               "mass": "MASS-style", "span_corruption": "replace spans", "drop_tokens": "drop tokens"}
REFERENCE = "span_corruption"


def training_flops(objective, backbone):
    """One example's training FLOPs: 3 × the forward pass's 2 per multiply-add (docs/algorithms.md §22).

    An encoder block over `T` inputs costs `2T(4H·A + 2H·I) + 4T²·A` (`A` the
    heads' total width); a decoder block over `S` targets its self-attention
    block, plus cross-attention `2S·2H·A + 2T·2H·A + 4S·T·A`; the tied head `2S·H·V`.
    """
    h, i, v = backbone.hidden_dim, backbone.intermediate_dim, backbone.vocabulary_size
    a = backbone.num_heads * (backbone.key_dim or h // backbone.num_heads)
    t, s = objective.inputs_length, objective.targets_length

    def block(n):
        return 2 * n * (4 * h * a + 2 * h * i) + 4 * n * n * a

    cross = 2 * s * 2 * h * a + 2 * t * 2 * h * a + 4 * s * t * a
    return 3 * (backbone.num_layers * block(t) + backbone.num_decoder_layers * (block(s) + cross) + 2 * s * h * v)


def topic_examples(examples):
    """BBC News topic examples as text to text: "topic: <article>" -> the topic's name."""
    return TaskExamples([{"source": f"topic: {e['text']}", "target": e["label"]} for e in examples.examples])


def _pretrained(objective, documents, held_out, tokenizer, args, seed):
    """`(backbone, steps, seconds)`: a fresh `t5_tiny` pretrained with `objective` at the run's equal compute."""
    record = OBJECTIVES[objective]
    set_random_seed(seed)
    backbone = record.model(args.model, tokenizer)
    steps = round(args.steps * training_flops(t5_objective(REFERENCE, tokenizer, args.sequence_length), backbone)
                  / training_flops(t5_objective(objective, tokenizer, args.sequence_length), backbone))
    lm = record.pretrainer(backbone, tokenizer)
    lm.compile(optimizer=run_optimizer(steps, args.learning_rate))
    train, _ = t5_data(objective, documents, held_out, tokenizer, args.sequence_length, args.batch_size, seed)
    start = time.time()
    lm.fit(train, steps_per_epoch=steps, epochs=1, verbose=2)
    return backbone, steps, time.time() - start


def _finetuned(backbone, tokenizer, train, validation, args, name, seed):
    metrics = finetune("text", backbone, tokenizer, train, validation, os.path.join(args.output, name),
                       epochs=args.finetune_epochs, batch_size=args.batch_size,
                       learning_rate=args.finetune_learning_rate, sequence_length=args.finetune_length,
                       seed=seed, overwrite=True, log=lambda line: None)
    return metrics["exact"]


def table(results, args):
    """The Markdown lines of the results beside the paper's column."""
    lines = [f"| objective (T5 paper) | pretraining steps | BBC topics exact match, % (mean ± std, {args.seeds} "
             "seed(s)) | paper GLUE avg |", "|---|--:|--:|--:|"]
    for name, (steps, scores) in results.items():
        paper = f"{PAPER_GLUE[name]:.2f}" if name in PAPER_GLUE else "—"
        label = f"{name} ({PAPER_NAMES[name]})" if name in PAPER_NAMES else name
        lines.append(f"| {label} | {steps} | {np.mean(scores):.1f} ± {np.std(scores):.1f} | {paper} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="t5_tiny")
    parser.add_argument("--steps", type=int, default=600, help="span corruption's steps; the others at its FLOPs")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--vocabulary-size", type=int, default=4000)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--finetune-epochs", type=int, default=3)
    parser.add_argument("--finetune-learning-rate", type=float, default=1e-3)
    parser.add_argument("--finetune-length", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--output", default="runs/t5_objectives")
    parser.add_argument("--results", default=None, help="write the table here (Markdown)")
    parser.add_argument("--smoke", action="store_true", help="a toy size: checks that the script runs")
    args = parser.parse_args(argv)
    train, validation = read_bbc_news()
    objectives = T5_OBJECTIVES
    if args.smoke:
        objectives = ("prefix_lm", REFERENCE)
        args.steps, args.batch_size, args.sequence_length, args.vocabulary_size = 2, 4, 32, 400
        args.finetune_epochs, args.finetune_length = 1, 32
        train, validation = TaskExamples(train.examples[::45]), TaskExamples(validation.examples[::45])
    os.makedirs(args.output, exist_ok=True)
    documents = [e["text"].replace(". ", ".\n") for e in train.examples]
    held_out = documents[-max(len(documents) // 10, 2):]
    tokenizer = SENTENCE_PIECE.load(args.output, documents, args.vocabulary_size, print)
    train, validation = topic_examples(train), topic_examples(validation)
    results = {}
    for name in (*objectives, "from scratch"):
        steps, scores = 0, []
        for seed in range(args.seeds):
            if name == "from scratch":
                set_random_seed(seed)
                backbone, seconds = OBJECTIVES[REFERENCE].model(args.model, tokenizer), 0.0
            else:
                backbone, steps, seconds = _pretrained(name, documents, held_out, tokenizer, args, seed)
            scores.append(_finetuned(backbone, tokenizer, train, validation, args, f"{name}_{seed}", seed))
            print(f"{name} seed {seed}: {steps} steps ({seconds:.0f} s), exact match {scores[-1]:.1f}%", flush=True)
        results[name] = steps, scores
    lines = table(results, args)
    print("\n".join(lines))
    if args.results:
        with open(args.results, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
