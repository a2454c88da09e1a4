"""The BERT paper's masking-strategy ablation (its Table 8), at small scale.

    KERAS_BACKEND=jax python examples/masking_strategies.py [--steps 2000] [--output FILE] [--smoke]

The same small BERT (bert_tiny widened to 4 layers: H 128, 2 heads; pre-LN,
no dropout, as `kbert pretrain` trains it) is pretrained four times with the
masked-LM objective on `kbert pretrain`'s default corpus (the Python
documentation), once per way of corrupting the chosen 15% of tokens
(`[MASK]` / unchanged / random token): 80/10/10 (BERT), 100/0/0, 80/0/20 and
80/20/0, the columns in the paper's order MASK/SAME/RND. Each model is then
scored on a token-level task built offline from the held-out documents:
tagging each word as lower-case, Capitalised, UPPER-case, number or
punctuation. The tokenizer lower-cases, so the model sees no case: telling a
Capitalised word (a sentence start, a name such as `Python` or `None`) from a
lower-case one needs the context, as NER does. Tags sit on a word's first
piece (the BERT paper's NER recipe); the score is macro F1 over the five tags.

- Fine-tune: `kbert.tasks.TokenClassifier` on the whole encoder.
- Feature-based: `TokenClassifier(..., features="last_four")`: the frozen
  encoder's last four layers concatenated (the paper's best feature set,
  §5.3), then a linear token head (the paper used a two-layer BiLSTM)
  trained on them; the encoder's weights stay as pretrained.

The paper's numbers (BERT-base; MNLI dev accuracy, CoNLL-2003 NER dev F1)
are printed beside ours. The paper found the differences small, with
100% [MASK] worst for the feature-based route, where the encoder never sees
`[MASK]` at test time. At this scale the feature-based gap is larger (see
examples/results/masking_strategies.txt: 58.3 for 100/0/0 against 70.6 for 80/10/10).
"""

import argparse
import time

import keras
import numpy as np
from sklearn.metrics import f1_score

import kbert
from kbert.pretraining import BertPretrainer, create_optimizer, pretraining_dataset
from kbert.jobs.language_model_objectives import held_out_dataset
from kbert.jobs.objective_catalog import SHORT_RUN_OVERRIDES
from kbert.jobs.pretraining_run import HELD_OUT_EVERY, default_corpus
from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary

# name: ((mask_token_rate, random_token_rate), the paper's MNLI, NER fine-tune, NER feature-based)
STRATEGIES = {
    "80/10/10": ((0.8, 0.1), (84.2, 95.4, 94.9)),
    "100/0/0": ((1.0, 0.0), (84.3, 94.9, 94.0)),
    "80/0/20": ((0.8, 0.2), (84.1, 95.2, 94.6)),
    "80/20/0": ((0.8, 0.0), (84.4, 95.2, 94.7)),
}
TAGS = ("lower", "Capitalised", "UPPER", "number", "punctuation")
IGNORED = -100
MODEL = dict(num_layers=4, use_pooler=False, **SHORT_RUN_OVERRIDES)


def word_tag(word):
    """The tag id of a word as written in the original text."""
    if any(c.isdigit() for c in word):
        return TAGS.index("number")
    if not any(c.isalpha() for c in word):
        return TAGS.index("punctuation")
    if len(word) > 1 and word.isupper():
        return TAGS.index("UPPER")
    return TAGS.index("Capitalised" if word[0].isupper() else "lower")


def tagging_data(sentences, tokenizer, length):
    """`(inputs, labels)`: `[CLS] pieces [SEP]` padded to `length`, a tag on each word's first piece."""
    ids, starts, ends = (x.to_list() for x in tokenizer.tokenize_with_offsets(sentences))
    continuation = tokenizer.continuation_mask()
    token_ids = np.zeros((len(sentences), length), "int32")
    labels = np.full((len(sentences), length), IGNORED, "int32")
    for row, sentence in enumerate(sentences):
        pieces = ids[row][: length - 2]
        token_ids[row, : len(pieces) + 2] = [tokenizer.cls_id, *pieces, tokenizer.sep_id]
        for index, piece in enumerate(pieces):
            if continuation[piece]:
                continue
            last = index
            while last + 1 < len(ids[row]) and continuation[ids[row][last + 1]]:
                last += 1
            labels[row, index + 1] = word_tag(sentence[starts[row][index] : ends[row][last]])
    inputs = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
              "padding_mask": (token_ids != tokenizer.pad_id).astype("int32")}
    return inputs, labels


def sentences_of(documents, count, seed):
    lines = [line for document in documents for line in document.splitlines() if len(line.split()) >= 4]
    return [lines[i] for i in np.random.default_rng(seed).permutation(len(lines))[:count]]


def pretrain(rates, tokenizer, documents, args):
    """A `BertPretrainer` (MLM only) trained with the chosen tokens corrupted at `rates`."""
    keras.utils.set_random_seed(args.seed)
    backbone = kbert.models.build("bert_tiny", vocabulary_size=tokenizer.vocabulary_size, **MODEL)
    pretrainer = BertPretrainer(backbone, pair_objective=None)
    pretrainer.compile(optimizer=create_optimizer(
        "adamw", args.learning_rate, total_steps=args.steps, warmup_steps=args.steps // 10))
    data = pretraining_dataset(documents, tokenizer, objective="mlm", sequence_length=args.length,
                               batch_size=args.batch_size, seed=args.seed, replacement_rates=rates)
    pretrainer.fit(data, steps_per_epoch=args.steps, epochs=1, shuffle=False, verbose=0)  # the pipeline shuffles
    return pretrainer


def held_out_mlm_accuracy(pretrainer, tokenizer, documents, args):
    """Masked-LM accuracy of the trained MLM head on held-out documents, masked the standard way (80/10/10)."""
    data, batches = held_out_dataset(documents, args.seed, dict(
        tokenizer=tokenizer, objective="mlm", sequence_length=args.length, batch_size=args.batch_size))
    return pretrainer.evaluate(data, steps=batches, return_dict=True, verbose=0)["mlm_accuracy"]


def macro_f1(logits, labels):
    kept = labels != IGNORED
    return 100 * f1_score(labels[kept], np.argmax(logits, -1)[kept], average="macro",
                          labels=range(len(TAGS)))


def tagger_f1(backbone, train, test, args, features):
    """Macro F1 of `TokenClassifier` on a copy of `backbone`, reading the encoder's `features`.

    `"sequence_output"` fine-tunes the whole encoder; `"last_four"` trains only
    the head on the frozen encoder's last four layers, concatenated.
    """
    copy = kbert.models.Encoder.from_config(backbone.get_config())
    copy.set_weights(backbone.get_weights())
    model = kbert.tasks.TokenClassifier(copy, num_labels=len(TAGS), dropout=0.1, features=features)
    steps = args.task_epochs * (len(train[1]) // args.batch_size)
    model.compile(optimizer=create_optimizer("adamw", args.task_learning_rate, total_steps=steps,
                                             warmup_steps=steps // 10))
    model.fit(train[0], {"labels": train[1]}, batch_size=args.batch_size, epochs=args.task_epochs,
              verbose=0)
    return macro_f1(model.predict(test[0], batch_size=128, verbose=0), test[1])


def table(results, args):
    lines = [
        f"Masking strategies (BERT paper Table 8) at small scale: bert_tiny widened to 4 layers, "
        f"{args.steps} MLM steps of {args.batch_size} x {args.length}, backend {keras.backend.backend()}.",
        f"Task: 5-way word-shape tagging on lower-cased input ({args.train} training and {args.test} "
        "held-out sentences), macro F1; paper: BERT-base, MNLI accuracy and CoNLL-2003 NER F1 (dev).",
        "",
        f"{'MASK/SAME/RND':>14} | {'MLM acc':>7} {'fine-tune':>9} {'feature':>8} {'minutes':>7} | "
        f"{'paper MNLI':>10} {'NER fine-tune':>13} {'NER feature':>11}",
    ]
    for name, (mlm, tuned, feature, minutes) in results.items():
        paper = STRATEGIES[name][1]
        lines.append(f"{name:>14} | {mlm:7.3f} {tuned:9.1f} {feature:8.1f} {minutes:7.1f} | "
                     f"{paper[0]:10.1f} {paper[1]:13.1f} {paper[2]:11.1f}")
    return "\n".join(lines)


def print_report(report, output=None):
    """Print the report's table, and write it to `output` too when given."""
    print("\n" + report)
    if output:
        with open(output, "w") as f:
            f.write(report + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="pretraining steps per strategy")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--vocabulary-size", type=int, default=4000)
    parser.add_argument("--learning-rate", type=float, default=2e-3, help="pretraining peak")
    parser.add_argument("--train", type=int, default=2000, help="tagging training sentences")
    parser.add_argument("--test", type=int, default=1000, help="tagging held-out sentences")
    parser.add_argument("--task-epochs", type=int, default=2)
    parser.add_argument("--task-learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="run only this strategy (e.g. 80/10/10)")
    parser.add_argument("--output", help="also write the table to this file")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one strategy: check that the script runs")
    args = parser.parse_args()

    documents = default_corpus()
    if args.smoke:
        documents = documents[:40]
        args.steps, args.batch_size, args.length, args.vocabulary_size = 2, 4, 32, 1000
        args.train, args.test, args.task_epochs = 16, 8, 1
        args.only = args.only or next(iter(STRATEGIES))
    held_out = documents[HELD_OUT_EVERY - 1 :: HELD_OUT_EVERY]
    train_documents = [d for i, d in enumerate(documents) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    tokenizer = WordPieceTokenizer(learn_word_piece_vocabulary(train_documents, args.vocabulary_size))
    train = tagging_data(sentences_of(train_documents, args.train, 1), tokenizer, args.length)
    test = tagging_data(sentences_of(held_out, args.test, 2), tokenizer, args.length)
    results = {}
    for name, (rates, _) in STRATEGIES.items():
        if args.only and args.only != name:
            continue
        start = time.perf_counter()
        pretrainer = pretrain(rates, tokenizer, train_documents, args)
        mlm = held_out_mlm_accuracy(pretrainer, tokenizer, held_out, args)
        backbone = pretrainer.backbone
        scores = [tagger_f1(backbone, train, test, args, features)
                  for features in ("sequence_output", "last_four")]  # fine-tune, feature-based
        results[name] = (mlm, *scores, (time.perf_counter() - start) / 60)
        print(f"{name}: MLM accuracy {mlm:.3f}, fine-tune F1 {scores[0]:.1f}, feature-based F1 "
              f"{scores[1]:.1f} ({results[name][-1]:.1f} min)", flush=True)
    print_report(table(results, args), args.output)


if __name__ == "__main__":
    main()
