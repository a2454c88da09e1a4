"""Every pretraining objective of the lectures on the same small model at equal compute, then fine-tuned.

    KERAS_BACKEND=jax python examples/objectives_compared.py [--mlm-steps 1000] [--seeds 3] [--runs FOLDER]
        [--only ROW ...] [--output FILE] [--smoke]

The same small encoder (`bert_tiny`: 2 layers, H 128, 2 heads, I 512; pre-LN,
no dropout, as `kbert pretrain` trains it) is pretrained on `kbert pretrain`'s
default corpus (the Python documentation) with each objective of the jobs'
catalog (`kbert.jobs.objective_catalog.OBJECTIVES`: the same model, pretrainer,
data and held-out report as `kbert pretrain --objective NAME`): MLM (RoBERTa),
MLM + NSP (BERT), SOP (ALBERT), SpanBERT, ELECTRA, StructBERT and XLNet's
permutation LM. PLM needs XLNet's two-stream attention: its row is an XLNet of
the same size (`xlnet_tiny`: 2 layers, H 128, 2 heads, I 512), with relative
positions in place of the position table.

Equal compute: every run gets the training FLOPs of `--mlm-steps` MLM steps,
so each objective trains `mlm_steps · F(mlm) / F(objective)` steps, where
`F` is `training_flops` of one batch: 2 FLOPs per multiply-add of every
matrix product of the forward pass (the projections, the attention scores and
weighted sums, the feed-forward layers, and each head's dense and vocabulary
layers at the positions it runs on, read from the batch's static shapes),
times 3 for the backward pass. Embedding lookups, LayerNorms, softmaxes and
the masking are left out (docs/algorithms.md §22). ELECTRA counts its generator (the catalog's:
same depth, width max(H/4, 64)) and its discriminator; PLM counts both streams:
the content stream over every token and the query stream (kbert's
implementation runs its attention over every position and its feed-forward
layer over the predicted ones), each with Transformer-XL's relative-position
scores.

Each pretrained model is then fine-tuned twice, through the jobs' `finetune`
(what `kbert finetune` runs; XLNet in its own layout, `<cls>` last, padded on
the left):

- BBC News topics (`kbert.jobs.bbc_news`, 5 classes): accuracy and macro F1;
- a span-tagging task built offline from held-out documents: the runs of
  capitalised words (a sentence start, `Python`, `None`, `Unicode Standard`),
  IOB2-tagged `NAME` spans over lower-cased input, so finding a span's
  boundaries needs the context, as NER does; the tags come from
  examples/masking_strategies.py's `word_tag`, the score is the span-level
  F1 of `kbert finetune --task tag` (a span counts only if both ends are right).

A row more, "from scratch", fine-tunes the same bert_tiny from random
initialisation: the budget tells the objectives apart only where MLM beats it
clearly, and the first two verdicts say whether it does on each task. The
default fine-tuning is few-shot (200 BBC training articles, 200 tagging
sentences, 10 epochs), where what the encoder brings shows: on all 1,781
articles over the demo's 3 epochs, from scratch reaches 0.95, above every
pretrained row of this budget (examples/results/objectives_compared.md).
Every row runs `--seeds` seeds (the pretraining, and both fine-tunes; the
corpus split, vocabulary and task data stay those of `--seed`) and the table
gives mean ± standard deviation. The verdicts (`verdicts`) read each of
the lectures' claims off the means: ELECTRA beats MLM at equal compute (Clark
et al. 2020), NSP does not help (Liu et al. 2019, RoBERTa), span masking
helps span tasks (Joshi et al. 2020, SpanBERT), StructBERT's and XLNet's
objectives beat MLM (Wang et al. 2020; Yang et al. 2019): "holds" or "does
not hold" where the difference of the means exceeds twice its standard error
over the seeds, else "cannot tell at this budget"; with the margin. A claim
read on a task where MLM does not beat from scratch cannot tell either.

Each run keeps its pretrained encoder in `--runs FOLDER/<row>/<seed>/`
(`pretrained.weights.h5` and `pretrained.json`) and its scores in `row.json`
there, with the fine-tuning arguments they were made with. Both are read back
instead of rerun: a stopped comparison resumes; processes that share the
folder (`--only` some rows each, for example one per core under `taskset`)
give one table when the script runs once more without `--only`; and another
fine-tuning recipe (`FINE_TUNING_ARGUMENTS`) reuses the pretrained encoders,
so the budget's calibration (MLM against from scratch) can try recipes
without pretraining again. A folder pretrained with other arguments is
refused.
"""

import argparse
import json
import os
import re
import tempfile
import time

import keras
import numpy as np

from kbert.jobs.bbc_news import read_bbc_news
from kbert.jobs.finetuning_run import DEMO_LEARNING_RATE, finetune
from kbert.jobs.objective_catalog import OBJECTIVES
from kbert.jobs.pretraining_run import HELD_OUT_EVERY, default_corpus
from kbert.jobs.run_outputs import run_optimizer
from kbert.jobs.task_examples import TaskExamples
from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary
from masking_strategies import TAGS, print_report, sentences_of, word_tag

# objective: (the row's name, the builder it pretrains)
ROWS = {
    "mlm": ("MLM", "bert_tiny"),
    "mlm_nsp": ("MLM + NSP", "bert_tiny"),
    "sop": ("SOP", "bert_tiny"),
    "span": ("SpanBERT", "bert_tiny"),
    "electra": ("ELECTRA", "bert_tiny"),
    "structbert": ("StructBERT", "bert_tiny"),
    "plm": ("XLNet PLM", "xlnet_tiny"),
}
SCRATCH = "scratch"
CLAIMS = {
    "mlm_nsp": "NSP does not help (RoBERTa): expect <= MLM",
    "span": "span masking helps span tasks (SpanBERT): expect span F1 > MLM",
    "electra": "ELECTRA beats MLM at equal compute: expect > MLM",
    "structbert": "StructBERT's objectives help: expect > MLM",
    "plm": "XLNet's PLM helps: expect > MLM",
}
# claim -> (row, the row it is compared with, the score, whether the claim is that the row is higher)
VERDICTS = {
    "MLM pretraining beats from scratch (BBC accuracy: the budget can tell)": ("mlm", SCRATCH, "accuracy", True),
    "MLM pretraining beats from scratch (span F1: the budget can tell)": ("mlm", SCRATCH, "span_f1", True),
    "ELECTRA beats MLM at equal compute (BBC accuracy)": ("electra", "mlm", "accuracy", True),
    "NSP does not help (BBC accuracy)": ("mlm_nsp", "mlm", "accuracy", False),
    "span masking helps span tasks (span F1)": ("span", "mlm", "span_f1", True),
    "StructBERT's gains (BBC accuracy)": ("structbert", "mlm", "accuracy", True),
    "XLNet's gains (BBC accuracy)": ("plm", "mlm", "accuracy", True),
}
SCORES = {"accuracy": "BBC accuracy", "span_f1": "span F1"}
SPAN_TAGS = ("B-NAME", "I-NAME", "O")
# what `--runs`' arguments file leaves out: which rows, seeds and files a process takes, and the fine-tuning
# recipe (each row.json records its own)
RESULT_INDEPENDENT_ARGUMENTS = ("only", "seeds", "runs", "output")
FINE_TUNING_ARGUMENTS = ("bbc_train", "bbc_validation", "tag_train", "tag_test", "task_epochs", "task_length",
                         "task_learning_rate")
FEW_SHOT_EPOCHS = 10  # about 70 steps on 200 articles; the demo's 3 epochs of all of them take about 170
SBO_POSITION_DIM = 200  # `SpanBertPretrainer`'s offset table width


# --- FLOPs ------------------------------------------------------------------------------------------


def block_flops(rows, keys, hidden, intermediate):
    """Forward FLOPs of one transformer block: `rows` queries over `keys` keys (projections, attention,
    feed-forward).

    >>> block_flops(1, 1, 2, 4)
    72
    """
    return 2 * rows * (4 * hidden**2 + 2 * hidden * intermediate) + 4 * rows * keys * hidden


def head_flops(predictions, hidden, vocabulary, inputs=None):
    """Forward FLOPs of a masked-LM head at `predictions` positions: a dense transform then the tied vocabulary."""
    return 2 * predictions * ((inputs or hidden) * hidden + hidden * vocabulary)


def _xlnet_flops(backbone, length, predictions):
    """Per sequence: both streams of every XLNet block, and the tied LM head on the query stream."""
    hidden, intermediate = backbone.hidden_dim, backbone.intermediate_dim
    relative = 2 * length * (2 * length) * hidden  # scores against 2L relative positions, per stream
    content = block_flops(length, length, hidden, intermediate) + relative
    query = (2 * predictions * (2 * hidden**2 + 2 * hidden * intermediate)  # q, o, feed-forward on P rows
             + 4 * length * length * hidden + relative  # attention of every position (kbert's layout)
             + 4 * predictions * length * hidden)  # the target mapping there and back
    return backbone.num_layers * (content + query) + 2 * predictions * hidden * backbone.vocabulary_size


def _electra_flops(pretrainer, backbone, length, predictions):
    """Per sequence: the generator (projection, blocks, head) and the discriminator (blocks, head)."""
    hidden, width = backbone.hidden_dim, pretrainer.generator_hidden_dim
    embedding = backbone.embeddings.hidden_dim
    generator = pretrainer.generator_num_layers * block_flops(
        length, length, width, pretrainer.generator_intermediate_dim)
    generator += 2 * length * embedding * width * (width != embedding)
    generator += head_flops(predictions, embedding, backbone.vocabulary_size, inputs=width)
    discriminator = backbone.num_layers * block_flops(length, length, hidden, backbone.intermediate_dim)
    return generator + discriminator + 2 * length * (hidden**2 + hidden)


def training_flops(objective, pretrainer, backbone, x):
    """Training FLOPs of one batch `x` (3 × the forward pass; see the module docstring)."""
    batch, length = (int(size) for size in x["token_ids"].shape)
    if objective == "plm":
        return 3 * batch * _xlnet_flops(backbone, length, int(x["target_mapping"].shape[1]))
    predictions = int(x["mask_positions"].shape[1])
    if objective == "electra":
        return 3 * batch * _electra_flops(pretrainer, backbone, length, predictions)
    hidden, vocabulary = backbone.hidden_dim, backbone.vocabulary_size
    flops = backbone.num_layers * block_flops(length, length, hidden, backbone.intermediate_dim)
    flops += head_flops(predictions, hidden, vocabulary)
    if objective in ("mlm_nsp", "sop", "structbert"):
        flops += 2 * (hidden**2 + 3 * hidden)  # the pooler and the pair classifier on [CLS]
    if objective == "span":  # the span boundary head: two dense layers, then the tied vocabulary
        flops += 2 * predictions * ((2 * hidden + SBO_POSITION_DIM) * hidden + hidden**2 + hidden * vocabulary)
    if objective == "structbert":  # the word-order head over the shuffled trigrams' slots
        flops += head_flops(int(x["order_positions"].shape[1]), hidden, vocabulary)
    return 3 * batch * flops


# --- the span-tagging task -------------------------------------------------------------------------------


def span_tags(words):
    """IOB2 tags of the runs of capitalised (or upper-case) words.

    >>> span_tags(["The", "Unicode", "Standard", "says", "so", "in", "Python", "."])
    ['B-NAME', 'I-NAME', 'I-NAME', 'O', 'O', 'O', 'B-NAME', 'O']
    """
    named = [TAGS[word_tag(word)] in ("Capitalised", "UPPER") for word in words]
    return ["O" if not name else "I-NAME" if index and named[index - 1] else "B-NAME"
            for index, name in enumerate(named)]


def span_task(documents, count, seed):
    """`TaskExamples` of `count` sentences of `documents`: words (punctuation apart) and `span_tags`."""
    sentences = [re.findall(r"\w+|[^\w\s]", sentence) for sentence in sentences_of(documents, count, seed)]
    return TaskExamples([{"words": words, "tags": span_tags(words)} for words in sentences], list(SPAN_TAGS))


# --- the runs ------------------------------------------------------------------------------------------


def pretrain(objective, tokenizer, train_documents, held_out_documents, args, seed):
    """`(backbone, held-out report, steps, FLOPs)`: the catalog's run of `objective` at the MLM run's FLOPs."""
    record = OBJECTIVES[objective]
    keras.utils.set_random_seed(seed)
    backbone = record.model(ROWS[objective][1], tokenizer)
    pretrainer = record.pretrainer(backbone, tokenizer)
    train, held_out = record.data(train_documents, held_out_documents, tokenizer, args.length, args.batch_size,
                                  seed)
    x, _ = next(iter(train))
    step_flops = training_flops(objective, pretrainer, backbone, x)
    steps = max(round(args.budget / step_flops), 1)
    pretrainer.compile(optimizer=run_optimizer(steps, args.learning_rate))
    pretrainer.fit(train, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)  # the pipeline shuffles
    report = record.report.evaluate(pretrainer, held_out, train_documents, tokenizer, lambda line: None)
    return backbone, report, steps, steps * step_flops


def mlm_budget(tokenizer, train_documents, held_out_documents, args):
    """The training FLOPs of `--mlm-steps` steps of the catalog's MLM run: every run's budget."""
    record = OBJECTIVES["mlm"]
    backbone = record.model(ROWS["mlm"][1], tokenizer)
    train, _ = record.data(train_documents, held_out_documents, tokenizer, args.length, args.batch_size, args.seed)
    x, _ = next(iter(train))
    return args.mlm_steps * training_flops("mlm", record.pretrainer(backbone, tokenizer), backbone, x)


def fine_tune(task, backbone, tokenizer, data, output, args, seed):
    """The jobs' `finetune` of a copy of `backbone` (the other task starts from the same weights).

    `output` is overwritten: `row.json` records a finished run, a stopped fine-tuning restarts.
    """
    copy = type(backbone).from_config(backbone.get_config())
    copy.set_weights(backbone.get_weights())
    return finetune(task, copy, tokenizer, *data, output, epochs=args.task_epochs, batch_size=args.batch_size,
                    learning_rate=args.task_learning_rate, sequence_length=args.task_length, seed=seed,
                    overwrite=True, log=lambda line: None)


def held_out_accuracy(report):
    """The held-out accuracy of the objective's own report (masked LM, or XLNet's permutation LM)."""
    return next(value for name, value in report.items() if name.startswith("held_out") and "accuracy" in name)


def _mean_std(runs, score):
    values = [run[score] for run in runs]
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def table(results, args):
    lines = [
        f"Objectives at equal compute: {args.mlm_steps} MLM steps of {args.batch_size} x {args.length} "
        f"({args.budget / 1e12:.2f} TFLOPs per run), bert_tiny-sized models (PLM: xlnet_tiny, "
        f"same size), seeds {args.seed}..{args.seed + args.seeds - 1} (mean ± std), backend "
        f"{keras.backend.backend()}.",
        f"Fine-tuning: {args.task_epochs} epochs at {args.task_length} tokens, learning rate "
        f"{args.task_learning_rate:g}; BBC News {args.bbc_train or 'all'} training articles; span tagging "
        f"{args.tag_train} training and {args.tag_test} held-out sentences.",
        "",
        "Held-out LM acc: each objective's own held-out report (masked LM; ELECTRA: its generator's masked LM; "
        "PLM: the permutation LM's predictions), not comparable across objectives.",
        "",
        "| objective | steps | held-out LM acc | BBC accuracy | BBC macro F1 | span F1 | minutes | the lectures' claim "
        "|",
        "|-----------|------:|----------------:|-------------:|-------------:|--------:|--------:|---------------------"
        "|",
    ]
    for objective, runs in results.items():
        name = "from scratch" if objective == SCRATCH else ROWS[objective][0]
        lines.append(f"| {name} | {runs[0]['steps']} | {_mean_std(runs, 'lm')} | {_mean_std(runs, 'accuracy')} | "
                     f"{_mean_std(runs, 'macro_f1')} | {_mean_std(runs, 'span_f1')} | "
                     f"{np.mean([run['minutes'] for run in runs]):.1f} | {CLAIMS.get(objective, '')} |")
    return "\n".join(lines + ["", *verdicts(results)])


def _compare(results, row, other, score, higher):
    """`(answer, margin, standard error)` of the claim that `row` scores higher (`higher`) or not than `other`."""
    a, b = ([run[score] for run in results[name]] for name in (row, other))
    margin = float(np.mean(a) - np.mean(b))
    error = float(np.sqrt(np.var(a) / len(a) + np.var(b) / len(b)))
    if abs(margin) <= 2 * error or margin == 0:
        return "cannot tell at this budget", margin, error
    return ("holds" if (margin > 0) == higher else "does not hold"), margin, error


def verdicts(results):
    """One line per claim of `VERDICTS` whose rows and score ran: holds, does not hold, or cannot tell, with the margin.

    The margin is the difference of the means; it tells where it exceeds twice
    its standard error over the seeds (`std/√n` of each row, combined). A
    claim against MLM on a score where MLM does not beat from scratch cannot
    tell: that task does not show what pretraining brings at this budget.

    >>> runs = {"mlm": [{"accuracy": a} for a in (0.5, 0.52)], "scratch": [{"accuracy": a} for a in (0.3, 0.31)]}
    >>> verdicts(runs)[0]  # doctest: +NORMALIZE_WHITESPACE
    '- MLM pretraining beats from scratch (BBC accuracy: the budget can tell): holds
       (margin +0.205 ± 0.008 standard error)'
    >>> runs = {name: [{"span_f1": f} for f in scores]
    ...         for name, scores in (("mlm", (0.5, 0.52)), ("scratch", (0.5, 0.53)), ("span", (0.7, 0.72)))}
    >>> verdicts(runs)[-1]  # doctest: +NORMALIZE_WHITESPACE
    '- span masking helps span tasks (span F1): cannot tell at this budget (MLM does not beat from scratch on
       span F1; the margin alone: holds) (margin +0.200 ± 0.010 standard error)'
    """
    lines = []
    for claim, (row, other, score, higher) in VERDICTS.items():
        if row not in results or other not in results or score not in results[row][0]:
            continue
        answer, margin, error = _compare(results, row, other, score, higher)
        if other == "mlm" and SCRATCH in results and _compare(results, "mlm", SCRATCH, score, True)[0] != "holds":
            alone = "" if answer.startswith("cannot") else f"; the margin alone: {answer}"
            answer = f"cannot tell at this budget (MLM does not beat from scratch on {SCORES[score]}{alone})"
        lines.append(f"- {claim}: {answer} (margin {margin:+.3f} ± {error:.3f} standard error)")
    return lines


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlm-steps", type=int, default=1000, help="the MLM run's steps; the compute of every run")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=64, help="pretraining sequence length")
    parser.add_argument("--vocabulary-size", type=int, default=8000, help="kbert pretrain's default")
    parser.add_argument("--learning-rate", type=float, default=2e-3, help="pretraining peak")
    parser.add_argument("--documents", type=int, help="pretrain on only the first N documents of the corpus")
    parser.add_argument("--bbc-train", type=int, default=200, help="fine-tune on N BBC News training articles "
                        "(0: all)")
    parser.add_argument("--bbc-validation", type=int, help="score on only N BBC News validation articles")
    parser.add_argument("--tag-train", type=int, default=200, help="span-tagging training sentences")
    parser.add_argument("--tag-test", type=int, default=1000, help="span-tagging held-out sentences")
    parser.add_argument("--task-epochs", type=int, default=FEW_SHOT_EPOCHS)
    parser.add_argument("--task-length", type=int, default=128, help="fine-tuning sequence length")
    parser.add_argument("--task-learning-rate", type=float, default=DEMO_LEARNING_RATE)
    parser.add_argument("--seed", type=int, default=0, help="the data's seed, and the first run's")
    parser.add_argument("--seeds", type=int, default=3, help="runs per row, seeds --seed, --seed + 1, ...")
    parser.add_argument("--only", nargs="+", choices=[*ROWS, SCRATCH], help="run only these rows")
    parser.add_argument("--runs", help="folder of the runs' pretrained encoders and scores, read back when there "
                        "(default: a new one)")
    parser.add_argument("--output", help="also write the table to this file")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.mlm_steps, args.batch_size, args.length, args.vocabulary_size, args.documents = 2, 4, 32, 600, 30
        args.bbc_train, args.bbc_validation, args.tag_train, args.tag_test = 8, 8, 8, 8
        args.task_epochs, args.task_length, args.seeds = 1, 32, 1
    return args


def _read_json(path):
    with open(path) as file:
        return json.load(file)


def _write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as file:
        json.dump(value, file, default=float)


def runs_folder(args):
    """`--runs` (or a new temporary folder), with the arguments its runs were made with: written, or checked."""
    folder = args.runs or tempfile.mkdtemp(prefix="objectives_compared_")
    arguments = {name: value for name, value in vars(args).items()
                 if name not in (*RESULT_INDEPENDENT_ARGUMENTS, *FINE_TUNING_ARGUMENTS)}
    path = os.path.join(folder, "arguments.json")
    if not os.path.exists(path):
        _write_json(path, arguments)
        return folder
    saved = _read_json(path)
    changed = [f"--{name.replace('_', '-')} {saved.get(name)}, not {value}" for name, value in arguments.items()
               if saved.get(name) != value]
    if changed:
        raise SystemExit(f"--runs {folder} holds runs pretrained with other arguments ({'; '.join(changed)}); "
                         "give another folder.")
    return folder


def pretrained(objective, seed, tokenizer, train_documents, held_out, output, args):
    """`(backbone, {steps, flops, lm, minutes})`: the row's pretrained encoder, read from `output` when there.

    From scratch: a fresh bert_tiny drawn from `seed`, no steps.
    """
    keras.utils.set_random_seed(seed)
    if objective == SCRATCH:
        return OBJECTIVES["mlm"].model("bert_tiny", tokenizer), dict(steps=0, flops=0, lm=float("nan"), minutes=0.0)
    weights, record = os.path.join(output, "pretrained.weights.h5"), os.path.join(output, "pretrained.json")
    if os.path.exists(record):
        backbone = OBJECTIVES[objective].model(ROWS[objective][1], tokenizer)
        backbone.load_weights(weights)
        return backbone, _read_json(record)
    start = time.perf_counter()
    backbone, report, steps, flops = pretrain(objective, tokenizer, train_documents, held_out, args, seed)
    summary = dict(steps=steps, flops=flops, lm=held_out_accuracy(report),
                   minutes=(time.perf_counter() - start) / 60)
    os.makedirs(output, exist_ok=True)
    backbone.save_weights(weights)
    _write_json(record, summary)
    return backbone, summary


def run(objective, seed, tokenizer, train_documents, held_out, bbc, spans, output, args):
    """One row's run with `seed`: pretrained (from scratch: a fresh bert_tiny) then fine-tuned on both tasks.

    Its scores are saved to `output/row.json` with the fine-tuning arguments,
    and read from there when an earlier run with the same ones wrote them.
    """
    path = os.path.join(output, "row.json")
    recipe = {name: getattr(args, name) for name in FINE_TUNING_ARGUMENTS}
    row = _read_json(path) if os.path.exists(path) else {}
    if row.get("fine_tuning") == recipe:
        return row
    backbone, row = pretrained(objective, seed, tokenizer, train_documents, held_out, output, args)
    start = time.perf_counter()
    topics = fine_tune("classify", backbone, tokenizer, bbc, os.path.join(output, "bbc"), args, seed)
    tagging = fine_tune("tag", backbone, tokenizer, spans, os.path.join(output, "tag"), args, seed)
    row = dict(row, accuracy=topics["accuracy"], macro_f1=topics["macro_f1"], span_f1=tagging["f1"],
               minutes=row["minutes"] + (time.perf_counter() - start) / 60, fine_tuning=recipe)
    print(f"{objective} seed {seed}: {row['steps']} steps, {row['flops'] / 1e12:.3f} TFLOPs, BBC accuracy "
          f"{topics['accuracy']:.3f}, span F1 {tagging['f1']:.3f} ({row['minutes']:.1f} min)", flush=True)
    _write_json(path, row)
    return row


def main():
    args = parse_arguments()
    output = runs_folder(args)
    documents = default_corpus()[: args.documents]
    held_out = documents[HELD_OUT_EVERY - 1 :: HELD_OUT_EVERY]
    train_documents = [d for i, d in enumerate(documents) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    tokenizer = WordPieceTokenizer(learn_word_piece_vocabulary(train_documents, args.vocabulary_size),
                                   lowercase=True)
    bbc_train, bbc_validation = read_bbc_news()
    rng = np.random.default_rng(args.seed)  # a random subset keeps the five topics
    bbc = [TaskExamples([data.examples[i] for i in sorted(rng.permutation(len(data.examples))[: count or None])],
                        data.labels) for data, count in ((bbc_train, args.bbc_train),
                                                          (bbc_validation, args.bbc_validation))]
    spans = (span_task(train_documents, args.tag_train, 1), span_task(held_out, args.tag_test, 2))
    objectives = [name for name in (*ROWS, SCRATCH) if not args.only or name in args.only]
    results = {}
    args.budget = mlm_budget(tokenizer, train_documents, held_out, args)
    for objective in objectives:
        results[objective] = [run(objective, seed, tokenizer, train_documents, held_out, bbc, spans,
                                  os.path.join(output, objective, str(seed)), args)
                              for seed in range(args.seed, args.seed + args.seeds)]
    print_report(table(results, args), args.output)


if __name__ == "__main__":
    main()
