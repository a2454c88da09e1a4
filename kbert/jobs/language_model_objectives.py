"""The encoders' and GPT-2's objectives in `kbert pretrain`: their data and their two reports.

`token_data` batches WordPiece text with `pretraining_dataset` for any of
its objectives. `MASKED_LM` reports the masked-LM objectives (`mlm_nsp`,
`mlm`, `sop`, `span`, `electra`, `structbert`): held-out masked-LM loss and
accuracy next to always predicting the most frequent training token, and a
fill-in-the-blank demo; `PERMUTATION_LM` does the same for XLNet's `plm`
through the query stream. `NEXT_TOKEN` reports `clm` the same way on each next
token, with greedy continuations of held-out sentences.
"""

import collections
import functools

import keras
import numpy as np

from kbert.backend.ops import few_calls_outputs
from kbert.jobs.pretraining_report import PretrainingReport
from kbert.jobs.run_outputs import DEMO_SENTENCES, HELD_OUT_EVERY
from kbert.pretraining.pretraining_dataset import pretraining_dataset
from kbert.tasks.causal_lm import next_token_weights

CONTINUED_TOKENS = 12
_TOKENIZED_LINES = 4096


def held_out_dataset(held_out_documents, seed, data):
    """`(dataset, batches)`: the held-out documents masked once, cached, and their batch count."""
    held_out = pretraining_dataset(held_out_documents, seed=seed + 1, masking="static",
                                   dupe_factor=1, repeat=False, **data)
    held_out = held_out.cache()
    batches = sum(1 for _ in held_out)  # evaluate warns on an unsized dataset
    if not batches:
        raise ValueError(
            f"The held-out documents (every {HELD_OUT_EVERY}th) fill no batch of "
            f"{data['batch_size']} x {data['sequence_length']}; give a larger corpus or a "
            "smaller batch."
        )
    return held_out, batches


def token_data(objective, train_documents, held_out_documents, tokenizer, sequence_length, batch_size, seed):
    """`(train, (held_out, batches))`: `pretraining_dataset` batches of `objective`, endless for training."""
    data = dict(tokenizer=tokenizer, objective=objective, sequence_length=sequence_length,
                batch_size=batch_size)
    train = pretraining_dataset(train_documents, seed=seed, **data)
    return train, held_out_dataset(held_out_documents, seed, data)


def _masked_targets(batch):
    """`(target ids, weights)` as NumPy of a held-out batch: its masked tokens."""
    _, y = batch
    return np.asarray(y["mask_ids"]), np.asarray(y["mask_weights"])


def _next_token_targets(batch):
    """`(target ids, weights)` as NumPy of a held-out batch: each next token."""
    weights = next_token_weights(np.asarray(batch["padding_mask"]))
    return np.asarray(batch["token_ids"])[:, 1:], keras.ops.convert_to_numpy(weights)


def _frequency_baseline(train_documents, held_out_dataset, tokenizer, targets):
    """Accuracy on the held-out `targets` of always predicting the most frequent training token."""
    lines = [line for document in train_documents for line in document.splitlines()]
    counts = collections.Counter()
    for start in range(0, len(lines), _TOKENIZED_LINES):  # one tokenizer call per chunk, not per document
        for ids in tokenizer(lines[start:start + _TOKENIZED_LINES]):
            counts.update(ids)
    most_frequent, _ = counts.most_common(1)[0]
    hits = total = 0.0
    for batch in held_out_dataset:
        target_ids, weights = targets(batch)
        hits += float(((target_ids == most_frequent) * weights).sum())
        total += float(weights.sum())
    return tokenizer.id_to_token(most_frequent), hits / max(total, 1.0)


def _evaluation(metric, predicted, targets, pretrainer, held_out, train_documents, tokenizer, log):
    """Held-out loss and accuracy of the `metric` head, next to the most-frequent-token baseline."""
    held_out, batches = held_out
    results = pretrainer.evaluate(held_out, steps=batches, return_dict=True, verbose=0)
    frequent_token, baseline = _frequency_baseline(train_documents, held_out, tokenizer, targets)
    loss, accuracy = float(results[f"{metric}_loss"]), float(results[f"{metric}_accuracy"])
    evaluation = {
        f"held_out_{metric}_loss": loss,
        f"held_out_{metric}_accuracy": accuracy,
        "most_frequent_token": frequent_token,
        "most_frequent_token_accuracy": baseline,
    }
    log(f"\nHeld-out {predicted}: loss {loss:.3f}, accuracy {accuracy:.3f} (always predicting "
        f"{frequent_token!r}: {baseline:.3f})")
    return evaluation


def _title(metric, predicted, metrics):
    """The learning curve's title: the run and its held-out accuracy beside the frequency baseline."""
    return (f"{metrics['model']}, {metrics['objective']}: held-out {predicted} accuracy "
            f"{metrics[f'held_out_{metric}_accuracy']:.3f} "
            f"(most frequent token {metrics['most_frequent_token_accuracy']:.3f})")


def _demo_sentences(documents, rng):
    sentences = [s for d in documents for s in d.splitlines() if 6 <= len(s.split()) <= 25]
    rng.shuffle(sentences)
    return sentences


def _continuations(model, tokenizer, documents, held_out, sequence_length, rng, log):
    """Print the model's greedy continuation of the first half of a few held-out sentences."""
    log(f"\nContinue the text (held-out sentences; {CONTINUED_TOKENS} greedy tokens):")
    for sentence in _demo_sentences(documents, rng)[:DEMO_SENTENCES]:
        words = sentence.split()
        prompt, rest = " ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])
        ids = [tokenizer.cls_id, *tokenizer([prompt])[0]]
        generated = model.generate(
            {"token_ids": np.array([ids], "int32"), "padding_mask": np.ones((1, len(ids)), "int32")},
            max_new_tokens=CONTINUED_TOKENS,
        )[0].tolist()
        end = generated.index(tokenizer.sep_id) if tokenizer.sep_id in generated else len(generated)
        log(f"  {prompt} ...")
        log(f"    text: {rest}    model: {tokenizer.detokenize(generated[:end])}")


def masked_inputs(tokenizer, left, right, sequence_length):
    """One sequence `[CLS] left [MASK] right [SEP]`, padded, with its mask position; `None` if cut."""
    ids = [tokenizer.cls_id, *left, tokenizer.mask_id, *right, tokenizer.sep_id][:sequence_length]
    position = len(left) + 1
    if position >= len(ids) - 1:
        return None
    padding = sequence_length - len(ids)
    x = {
        "token_ids": np.array([ids + [tokenizer.pad_id] * padding], "int32"),
        "segment_ids": np.zeros((1, sequence_length), "int32"),
        "padding_mask": np.array([[1] * len(ids) + [0] * padding], "int32"),
        "mask_positions": np.array([[position]], "int32"),
    }
    # A one-token span, for SpanBERT's boundary head, and no shuffled trigram,
    # for StructBERT's word-order head; the other models ignore them.
    x.update(span_left=x["mask_positions"] - 1, span_right=x["mask_positions"] + 1,
             span_offsets=0 * x["mask_positions"], order_positions=np.zeros((1, 3), "int32"))
    return x


def masked_lm_logits(model, x):
    """The masked-LM head's vocabulary logits at the one `[MASK]` of `x`."""
    return few_calls_outputs(model, x)["mlm_logits"][0, 0]


def permutation_lm_logits(model, x):
    """XLNet's query-stream logits at the `[MASK]` of `x`, which no position may attend to."""
    length, position = x["token_ids"].shape[1], int(x["mask_positions"][0, 0])
    permutation_mask = np.zeros((1, length, length), "float32")
    permutation_mask[:, :, position] = 1.0
    target_mapping = np.zeros((1, 1, length), "float32")
    target_mapping[0, 0, position] = 1.0
    inputs = {name: x[name] for name in ("token_ids", "segment_ids", "padding_mask")}
    inputs.update(permutation_mask=permutation_mask, target_mapping=target_mapping)
    return few_calls_outputs(model, inputs)["plm_logits"][0, 0]


def _fill_in_the_blank(blank_logits, model, tokenizer, documents, held_out, sequence_length, rng, log):
    """Mask one word in a few held-out sentences and print the model's top guesses (`blank_logits`)."""
    log("\nFill in the blank (held-out sentences; top 5 guesses):")
    for sentence in _demo_sentences(documents, rng)[:DEMO_SENTENCES]:
        words = sentence.split()
        candidates = [i for i, w in enumerate(words) if w.isalpha() and len(w) > 2]
        if not candidates:
            continue
        index = rng.choice(candidates)
        before, answer, after = " ".join(words[:index]), words[index], " ".join(words[index + 1 :])
        x = masked_inputs(tokenizer, *tokenizer([before, after]), sequence_length)
        if x is None:
            continue
        logits = blank_logits(model, x)
        guesses = ", ".join(tokenizer.id_to_token(int(t)) for t in np.argsort(-logits)[:5])
        log(f"  {before} [MASK] {after}")
        log(f"    answer: {answer.lower()}    model: {guesses}")


def _report(metric, predicted, targets, demo):
    return PretrainingReport(
        evaluate=functools.partial(_evaluation, metric, predicted, targets),
        title=functools.partial(_title, metric, predicted),
        demo=demo,
    )


MASKED_LM = _report("mlm", "masked-LM", _masked_targets, functools.partial(_fill_in_the_blank, masked_lm_logits))
PERMUTATION_LM = _report(
    "plm", "permutation-LM", _masked_targets, functools.partial(_fill_in_the_blank, permutation_lm_logits)
)
NEXT_TOKEN = _report("clm", "next-token", _next_token_targets, _continuations)
