"""`kbert pretrain --objective bilm`: the main job for ELMo (see `pretraining_run`).

The same run as the encoders' (held-out split, resumable `fit`, saved model,
metrics and learning curve), with a word vocabulary (`vocab.txt`, one word
per line) for the shared softmax, the biLM data (`bilm_dataset`), held-out
forward and backward perplexities next to a unigram model's, and a
next-word demo.
"""

import math
import random

import keras
import numpy as np

from kbert.backend_utils import lazy_import
from kbert.models.presets import build
from kbert.pretraining.bilm_dataset import (
    UNKNOWN_ID,
    bilm_dataset,
    learn_word_vocabulary,
    sentence_words,
)
from kbert.pretraining.bilm_pretrainer import BiLMPretrainer
from kbert.jobs.run_outputs import (
    DEMO_SENTENCES,
    HELD_OUT_EVERY,
    OUTPUTS,
    STEPS_PER_EPOCH,
    run_optimizer,
    save_run,
    saved_vocabulary,
)

text = lazy_import("kbert.text")


def _word_vocabulary(output, train_documents, vocabulary_size, log):
    """The words of `output/vocab.txt`, learned from `train_documents` if absent."""
    path = saved_vocabulary(output, learn_word_vocabulary, train_documents, vocabulary_size, "word",
                            log)
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


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


def _evaluation(pretrainer, train_documents, vocabulary, held_out, batches, log):
    """Held-out forward and backward perplexities, next to the unigram model's."""
    results = pretrainer.evaluate(held_out, steps=batches, return_dict=True, verbose=0)
    evaluation = {
        "held_out_forward_perplexity": math.exp(float(results["forward_lm_loss"])),
        "held_out_backward_perplexity": math.exp(float(results["backward_lm_loss"])),
        "unigram_perplexity": _unigram_perplexity(train_documents, vocabulary, held_out),
    }
    log(f"\nHeld-out perplexity: forward {evaluation['held_out_forward_perplexity']:.1f}, backward "
        f"{evaluation['held_out_backward_perplexity']:.1f} (unigram model: {evaluation['unigram_perplexity']:.1f})")
    return evaluation


def _demo(pretrainer, vocabulary, documents, sequence_length, rng, log):
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
        logits = keras.ops.convert_to_numpy(pretrainer(x)["forward_logits"])[0, len(prefix) - 1]
        guesses = ", ".join(vocabulary[int(t)] for t in np.argsort(-logits)[:5])
        log(f"  {' '.join(words[1:cut])} ___")
        log(f"    answer: {words[cut]}    model: {guesses}")


def run_bilm(run, arguments, train_documents, held_out_documents, callbacks, log):
    """Pretrain the ELMo of `arguments["model"]` with the biLM objective; return the metrics.

    `run` is the `ResumableRun` that `run_pretraining` opened for `arguments`.
    """
    model, steps = arguments["model"], arguments["steps"]
    vocabulary = _word_vocabulary(run.output, train_documents, arguments["vocabulary_size"], log)
    backbone = build(model, dropout=0.0)
    pretrainer = BiLMPretrainer(backbone, vocabulary_size=len(vocabulary))
    pretrainer.compile(optimizer=run_optimizer(steps, arguments["learning_rate"]))
    data = {name: arguments[name] for name in ("sequence_length", "batch_size")}
    train = bilm_dataset(train_documents, vocabulary, seed=arguments["seed"], **data)
    held_out, held_out_batches = _held_out(held_out_documents, vocabulary, data)
    log(f"Pretraining {model} ({backbone.count_params():,} parameters) with bilm for {steps} steps "
        f"of {data['batch_size']} x {data['sequence_length']} on {keras.backend.backend()} ...")
    run.fit(pretrainer, train, min(STEPS_PER_EPOCH, steps), callbacks, verbose=1 if log is print else 2)
    metrics = {
        **{name: arguments[name] for name in ("backend", "model", "objective", "steps", "batch_size",
                                             "sequence_length")},
        "vocabulary_size": len(vocabulary),
        **_evaluation(pretrainer, train_documents, vocabulary, held_out, held_out_batches, log),
        "wall_time_seconds": round(run.elapsed_seconds(), 1),
    }
    title = (f"{model}, bilm: held-out perplexity {metrics['held_out_forward_perplexity']:.1f} forward, "
             f"{metrics['held_out_backward_perplexity']:.1f} backward (unigram {metrics['unigram_perplexity']:.1f})")
    save_run(run, pretrainer, metrics, title, OUTPUTS, log)
    _demo(pretrainer, vocabulary, held_out_documents, data["sequence_length"], random.Random(arguments["seed"]), log)
    return metrics
