"""`kbert pretrain --objective bart`: BART's denoising, its data and its report.

The run (`kbert.jobs.pretraining_run`) learns a byte-level BPE (BART's
special ids), builds the BART of `--model` without dropout in a
`kbert.tasks.Seq2SeqLM`, and fits it on `BartDenoising` batches (sentence
permutation, then text infilling) of `bart_data`. `BART_DENOISING` reports
the held-out denoising loss and token accuracy, and prints a few held-out
texts, noised and greedily reconstructed.
"""

import keras
import numpy as np

from kbert.jobs.pretraining_report import PretrainingReport
from kbert.jobs.run_outputs import DEMO_SENTENCES, HELD_OUT_EVERY
from kbert.pretraining.bart_denoising import BartDenoising, bart_examples


def _examples(documents, tokenizer, sequence_length):
    return bart_examples([d.splitlines() for d in documents], tokenizer, sequence_length)


def bart_data(train_documents, held_out_documents, tokenizer, sequence_length, batch_size, seed):
    """`(train, held_out)`: endless denoising batches, and the held-out ones once, cached."""
    noise = BartDenoising(sequence_length, tokenizer.mask_id)
    train = noise.dataset(_examples(train_documents, tokenizer, sequence_length), batch_size, seed=seed,
                          repeat=True)
    held_out = noise.dataset(_examples(held_out_documents, tokenizer, sequence_length), batch_size,
                             seed=seed + 1, shuffle=False).cache()
    return train, held_out


def _evaluation(lm, held_out, train_documents, tokenizer, log):
    """Held-out denoising loss and accuracy over the real target tokens."""
    hits = total = 0.0
    losses = []
    for inputs, targets in held_out:
        logits = keras.ops.convert_to_numpy(lm(inputs, training=False))
        targets = np.asarray(targets)
        real = targets != lm.backbone.pad_id
        hits += float(((logits.argmax(-1) == targets) & real).sum())
        total += float(real.sum())
        losses.append(float(keras.ops.convert_to_numpy(lm.compute_loss(y=targets, y_pred=logits))))
    if not total:
        raise ValueError(f"The held-out documents (every {HELD_OUT_EVERY}th) fill no batch; give a larger "
                         "corpus or a smaller batch.")
    evaluation = {"held_out_denoising_loss": float(np.mean(losses)),
                  "held_out_token_accuracy": hits / total}
    log(f"\nHeld-out denoising: loss {evaluation['held_out_denoising_loss']:.3f}, token accuracy "
        f"{evaluation['held_out_token_accuracy']:.3f}")
    return evaluation


def _title(metrics):
    return f"{metrics['model']}, bart: held-out token accuracy {metrics['held_out_token_accuracy']:.3f}"


def _text(tokenizer, ids):
    return tokenizer.detokenize([list(ids)]).numpy()[0].decode("utf-8", "replace").strip()


def demo(lm, tokenizer, held_out, max_new_tokens, log, count=DEMO_SENTENCES):
    """Print `count` texts of the first batch of `held_out`, noised, and the model's greedy reconstruction."""
    inputs, targets = next(iter(held_out))
    inputs = {name: np.asarray(value)[:count] for name, value in inputs.items()}
    generated = lm.generate(inputs, max_new_tokens=max_new_tokens)
    log("\nDenoising (held-out text; noised, then reconstructed):")
    for row in range(min(count, len(generated))):
        log(f"  original: {_text(tokenizer, np.asarray(targets)[row])}")
        log(f"  noised:   {_text(tokenizer, inputs['encoder_token_ids'][row])}")
        log(f"  model:    {_text(tokenizer, generated[row])}")


def _reconstructions(lm, tokenizer, held_out_documents, held_out, sequence_length, rng, log):
    demo(lm, tokenizer, held_out, sequence_length, log)


BART_DENOISING = PretrainingReport(evaluate=_evaluation, title=_title, demo=_reconstructions)
