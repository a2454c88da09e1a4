"""`kbert pretrain --objective bilm`: ELMo's biLM, its data and its report.

The run (`kbert.jobs.pretraining_run`) learns a word vocabulary (`vocab.txt`,
one word per line) for the shared softmax, and fits the ELMo of `--model`
on `bilm_dataset` windows (`bilm_data`). `BILM` reports held-out forward and
backward perplexities next to a unigram model's, and a next-word demo.
"""

import math

import numpy as np

from kbert.backend.ops import few_calls_outputs

from kbert.backend.imports import lazy_import
from kbert.jobs.pretraining_report import PretrainingReport
from kbert.jobs.run_outputs import DEMO_SENTENCES, HELD_OUT_EVERY
from kbert.pretraining.bilm_dataset import UNKNOWN_ID, bilm_dataset, sentence_words

text = lazy_import("kbert.text")


def _held_out(documents, vocabulary, data):
    """`(dataset, batches)`: the held-out windows once, in order, cached."""
    dataset = bilm_dataset(documents, vocabulary, shuffle_buffer=1, repeat=False, seed=0, **data).cache()
    batches = sum(1 for _ in dataset)
    if not batches:
        raise ValueError(
            f"The held-out documents (every {HELD_OUT_EVERY}th) fill no batch of {data['batch_size']} x "
            f"{data['sequence_length']}; give a larger corpus or a smaller batch."
        )
    return dataset, batches


def bilm_data(train_documents, held_out_documents, vocabulary, sequence_length, batch_size, seed):
    """`(train, (held_out, batches))`: endless biLM windows of the words, and the held-out ones once."""
    data = dict(sequence_length=sequence_length, batch_size=batch_size)
    train = bilm_dataset(train_documents, vocabulary, seed=seed, **data)
    return train, _held_out(held_out_documents, vocabulary, data)


def _unigram_perplexity(train_documents, vocabulary, held_out):
    """Perplexity on the held-out targets (both directions') of the training words' add-one counts."""
    word_ids = {word: index for index, word in enumerate(vocabulary)}
    counts = np.ones(len(vocabulary))
    for document in train_documents:
        for word in sentence_words(document.splitlines()):
            counts[word_ids.get(word, UNKNOWN_ID)] += 1
    log_probabilities = np.log(counts / counts.sum())
    total = count = 0.0
    for x, y in held_out:
        mask, ids = x["padding_mask"].numpy(), y["token_ids"].numpy()
        pairs = mask[:, 1:] * mask[:, :-1]
        for targets in (ids[:, 1:], ids[:, :-1]):  # the forward and the backward targets
            total -= float((log_probabilities[targets] * pairs).sum())
            count += float(pairs.sum())
    return math.exp(total / max(count, 1.0))


def _evaluation(pretrainer, held_out, train_documents, vocabulary, log):
    """Held-out forward and backward perplexities, next to the unigram model's."""
    held_out, batches = held_out
    results = pretrainer.evaluate(held_out, steps=batches, return_dict=True, verbose=0)
    evaluation = {
        "held_out_forward_perplexity": math.exp(float(results["forward_lm_loss"])),
        "held_out_backward_perplexity": math.exp(float(results["backward_lm_loss"])),
        "unigram_perplexity": _unigram_perplexity(train_documents, vocabulary, held_out),
    }
    log(f"\nHeld-out perplexity: forward {evaluation['held_out_forward_perplexity']:.1f}, backward "
        f"{evaluation['held_out_backward_perplexity']:.1f} (unigram model: {evaluation['unigram_perplexity']:.1f})")
    return evaluation


def _title(metrics):
    return (f"{metrics['model']}, bilm: held-out perplexity {metrics['held_out_forward_perplexity']:.1f} forward, "
            f"{metrics['held_out_backward_perplexity']:.1f} backward (unigram {metrics['unigram_perplexity']:.1f})")


def _next_words(pretrainer, vocabulary, documents, held_out, sequence_length, rng, log):
    """Cut a few held-out sentences and print the forward LM's top guesses for the next word."""
    sentences = [s for d in documents for s in d.splitlines() if 6 <= len(text.split_words(s)) <= 25]
    rng.shuffle(sentences)
    log("\nNext word (held-out sentences; the forward LM's top 5 guesses):")
    for sentence in sentences[:DEMO_SENTENCES]:
        words = ["<S>", *text.split_words(sentence)]
        cut = rng.randrange(2, len(words))
        prefix = words[max(cut - sequence_length, 0) : cut]
        x = {"character_ids": text.character_ids(prefix, sequence_length)[None],
             "padding_mask": (np.arange(sequence_length) < len(prefix)).astype("int32")[None]}
        logits = few_calls_outputs(pretrainer, x)["forward_logits"][0, len(prefix) - 1]
        guesses = ", ".join(vocabulary[int(t)] for t in np.argsort(-logits)[:5])
        log(f"  {' '.join(words[1:cut])} ___")
        log(f"    answer: {words[cut]}    model: {guesses}")


BILM = PretrainingReport(evaluate=_evaluation, title=_title, demo=_next_words)
