"""`kbert pretrain` for T5: the objectives of the T5 paper, their data and their report.

The run (`kbert.jobs.pretraining_run`) learns a SentencePiece vocabulary with
T5's sentinels (`vocabulary_kind.SENTENCE_PIECE`), builds the T5 of `--model`
without dropout in a `kbert.tasks.Seq2SeqLM`, and fits it on
`kbert.pretraining.T5Objective` batches of `t5_data` (`span_corruption` by
default; `prefix_lm`, `bert_style`, `deshuffle`, `mass`, `drop_tokens`).
`T5_REPORT` gives the held-out loss and target-token accuracy beside always
predicting the most frequent training target, and prints a few held-out
examples: the corrupted input, the target and what the model generates (for
span corruption, the filled spans).
"""

import collections

import keras
import numpy as np

from kbert.jobs.pretraining_report import PretrainingReport
from kbert.jobs.run_outputs import DEMO_SENTENCES, HELD_OUT_EVERY
from kbert.jobs.vocabulary_kind import T5_SENTINELS
from kbert.pretraining.t5_objective import T5Objective

_TOKENIZED_LINES = 4096
# Training batches whose targets are counted for the most-frequent-target baseline.
_BASELINE_BATCHES = 20


def corpus_ids(documents, tokenizer):
    """The documents' SentencePiece ids, one list: each document's lines in order, then EOS.

    >>> from kbert.text import SentencePieceTokenizer, train_sentence_piece
    >>> tokenizer = SentencePieceTokenizer(train_sentence_piece(["a b c", "b c d"] * 20, 12))
    >>> ids = corpus_ids(["a b\\nc", "d"], tokenizer)
    >>> ids.count(tokenizer.end_id), ids[-1] == tokenizer.end_id
    (2, True)
    """
    lines = [(index, line) for index, document in enumerate(documents) for line in document.splitlines()]
    pieces = [[] for _ in documents]
    for start in range(0, len(lines), _TOKENIZED_LINES):  # one tokenizer call per chunk, not per line
        chunk = lines[start:start + _TOKENIZED_LINES]
        for (index, _), ids in zip(chunk, tokenizer.tokenize([line for _, line in chunk]).to_list()):
            pieces[index].extend(ids)
    return [i for ids in pieces for i in [*ids, tokenizer.end_id]]


def t5_objective(objective, tokenizer, sequence_length):
    """The `T5Objective` of a run: inputs of `sequence_length` ids, the tokenizer's sentinels and specials."""
    return T5Objective(objective, sequence_length, tokenizer.vocabulary_size, num_sentinels=T5_SENTINELS,
                       end_id=tokenizer.end_id, pad_id=tokenizer.pad_id,
                       first_regular_id=max(tokenizer.pad_id, tokenizer.end_id, tokenizer.unknown_id) + 1)


def t5_data(objective, train_documents, held_out_documents, tokenizer, sequence_length, batch_size, seed):
    """`(train, (held_out, train))`: endless `objective` batches, and the held-out ones once, cached."""
    examples = t5_objective(objective, tokenizer, sequence_length)
    train = examples.dataset(corpus_ids(train_documents, tokenizer), batch_size, seed=seed, repeat=True)
    held_out = examples.dataset(corpus_ids(held_out_documents, tokenizer), batch_size, seed=seed + 1,
                                shuffle=False)
    if int(held_out.cardinality()) == 0:
        raise ValueError(f"The held-out documents (every {HELD_OUT_EVERY}th) fill no batch of {batch_size} x "
                         f"{sequence_length}; give a larger corpus or a smaller batch.")
    return train, (held_out.cache(), train)


def _most_frequent_target(train, pad_id):
    counts = collections.Counter()
    for _, targets in train.take(_BASELINE_BATCHES):
        counts.update(int(t) for t in np.asarray(targets).ravel() if t != pad_id)
    return counts.most_common(1)[0][0]


def _evaluation(lm, held_out, train_documents, tokenizer, log):
    """Held-out loss and target-token accuracy, beside always predicting the most frequent training target."""
    held_out, train = held_out
    frequent = _most_frequent_target(train, tokenizer.pad_id)
    hits = baseline = total = 0.0
    losses = []
    for inputs, targets in held_out:
        logits = keras.ops.convert_to_numpy(lm(inputs, training=False))
        targets = np.asarray(targets)
        real = targets != tokenizer.pad_id
        hits += float(((logits.argmax(-1) == targets) & real).sum())
        baseline += float(((targets == frequent) & real).sum())
        total += float(real.sum())
        losses.append(float(keras.ops.convert_to_numpy(lm.compute_loss(y=targets, y_pred=logits))))
    piece = tokenizer.id_to_piece(frequent).numpy().decode("utf-8")
    evaluation = {"held_out_loss": float(np.mean(losses)), "held_out_token_accuracy": hits / total,
                  "most_frequent_token": piece, "most_frequent_token_accuracy": baseline / total}
    log(f"\nHeld-out targets: loss {evaluation['held_out_loss']:.3f}, token accuracy "
        f"{evaluation['held_out_token_accuracy']:.3f} (always predicting {piece!r}: "
        f"{evaluation['most_frequent_token_accuracy']:.3f})")
    return evaluation


def _title(metrics):
    return (f"{metrics['model']}, {metrics['objective']}: held-out token accuracy "
            f"{metrics['held_out_token_accuracy']:.3f} (most frequent token "
            f"{metrics['most_frequent_token_accuracy']:.3f})")


def _text(tokenizer, ids):
    return tokenizer.detokenize([[int(i) for i in ids]]).numpy()[0].decode("utf-8", "replace")


def _demo(lm, tokenizer, held_out_documents, held_out, sequence_length, rng, log):
    """Print a few held-out examples: the corrupted input, the target and the model's greedy output."""
    inputs, targets = next(iter(held_out[0]))
    inputs = {name: np.asarray(value)[:DEMO_SENTENCES] for name, value in inputs.items()}
    targets = np.asarray(targets)
    generated = lm.generate(inputs, max_new_tokens=targets.shape[1])
    log("\nHeld-out text, corrupted; the target; the model's output (greedy):")
    for row in range(min(DEMO_SENTENCES, len(generated))):
        log(f"  input:  {_text(tokenizer, inputs['encoder_token_ids'][row])}")
        log(f"  target: {_text(tokenizer, targets[row])}")
        log(f"  model:  {_text(tokenizer, generated[row])}")


T5_REPORT = PretrainingReport(evaluate=_evaluation, title=_title, demo=_demo)
