"""`kbert pretrain --objective bart`: BART's denoising pretraining, raw text to a saved model.

The same job as `kbert.jobs.pretraining_run` (which hands the `bart`
objective here), for an encoder-decoder:

1. read the corpus (default: the interpreter's documentation), hold out
   every tenth document;
2. learn a byte-level BPE (`vocab.json`, `merges.txt`; BART's special ids)
   from the training documents, or reuse the output folder's;
3. build the BART (`--model`, a `BART_PRESETS` name, sized to the
   vocabulary, without dropout) in a `kbert.tasks.Seq2SeqLM` with AdamW,
   warm-up and linear decay;
4. `fit` on `BartDenoising` batches (sentence permutation, then text
   infilling), resumable as every kbert run (`ResumableRun`);
5. evaluate the denoising loss and token accuracy on the held-out documents;
6. save `model.keras`, the tokenizer files, `metrics.json` and the learning
   curve, and print a few held-out sentences, noised and reconstructed.
"""

import os

import keras
import numpy as np

from kbert.models.presets import BART_PRESETS, build
from kbert.pretraining.bart_denoising import BartDenoising, bart_examples
from kbert.jobs.run_outputs import (
    DEMO_SENTENCES,
    STEPS_PER_EPOCH,
    run_optimizer,
    save_run,
)
from kbert.tasks.seq2seq_lm import Seq2SeqLM

OUTPUTS = ("vocab.json", "merges.txt", "model.keras", "metrics.json", "learning_curve.png")


def check_bart_run(model, sequence_length):
    """Raise a `ValueError` unless `model` is a BART preset that takes `sequence_length`."""
    if model not in BART_PRESETS:
        raise ValueError(
            f"The bart objective pretrains a BART; {model} is not one (choose one of "
            f"{', '.join(sorted(BART_PRESETS))})."
        )
    usable = BART_PRESETS[model]["max_positions"]
    if not 8 <= sequence_length <= usable:
        raise ValueError(f"Sequence length {sequence_length} is outside [8, {usable}] for {model}.")


def _tokenizer(output, train_documents, vocabulary_size, log):
    """The byte-level BPE of the output folder, learned from `train_documents` if absent."""
    from kbert.text import BytePairTokenizer, learn_byte_pair_vocabulary

    paths = [os.path.join(output, name) for name in ("vocab.json", "merges.txt")]
    if not all(os.path.exists(path) for path in paths):
        learn_byte_pair_vocabulary(train_documents, vocabulary_size, output)
        log(f"Learned a byte-level BPE of at most {vocabulary_size:,} ids from "
            f"{len(train_documents)} documents.")
    return BytePairTokenizer(*paths, add_prefix_space=True)


def _examples(documents, tokenizer, sequence_length):
    return bart_examples([d.splitlines() for d in documents], tokenizer, sequence_length)


def _compiled_model(model, vocabulary_size, steps, learning_rate):
    backbone = build(model, vocabulary_size=vocabulary_size, dropout=0.0)
    lm = Seq2SeqLM(backbone)
    lm.compile(optimizer=run_optimizer(steps, learning_rate))
    return backbone, lm


def _evaluation(lm, held_out, log):
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
        raise ValueError("The held-out documents (every 10th) fill no batch; give a larger corpus "
                         "or a smaller batch.")
    evaluation = {"held_out_denoising_loss": float(np.mean(losses)),
                  "held_out_token_accuracy": hits / total}
    log(f"\nHeld-out denoising: loss {evaluation['held_out_denoising_loss']:.3f}, token accuracy "
        f"{evaluation['held_out_token_accuracy']:.3f}")
    return evaluation


def _text(tokenizer, ids):
    return tokenizer.detokenize([list(ids)]).numpy()[0].decode("utf-8", "replace").strip()


def demo(lm, tokenizer, noise, held_out, log, count=DEMO_SENTENCES):
    """Print `count` held-out texts, noised, and the model's greedy reconstruction."""
    inputs, targets = next(iter(held_out))
    inputs = {name: np.asarray(value)[:count] for name, value in inputs.items()}
    generated = lm.generate(inputs, max_new_tokens=noise.sequence_length)
    log("\nDenoising (held-out text; noised, then reconstructed):")
    for row in range(min(count, len(generated))):
        log(f"  original: {_text(tokenizer, np.asarray(targets)[row])}")
        log(f"  noised:   {_text(tokenizer, inputs['encoder_token_ids'][row])}")
        log(f"  model:    {_text(tokenizer, generated[row])}")


def run_bart_pretraining(run, documents, split, output, arguments, callbacks=(), log=print):
    """Pretrain, evaluate and save a BART; return the metrics dict. See the module docstring.

    `run_pretraining` calls it with its `ResumableRun` (seeded), the
    corpus's `documents` (one sentence a line), `split` (which holds out the
    evaluation documents) and the `arguments` it records of the run (model,
    steps, batch_size, sequence_length, vocabulary_size, learning_rate, seed).
    """
    a = arguments
    train_documents, held_out_documents = split(documents)
    tokenizer = _tokenizer(output, train_documents, a["vocabulary_size"], log)
    backbone, lm = _compiled_model(a["model"], tokenizer.vocabulary_size, a["steps"], a["learning_rate"])
    noise = BartDenoising(a["sequence_length"], tokenizer.mask_id)
    train = noise.dataset(_examples(train_documents, tokenizer, a["sequence_length"]),
                          a["batch_size"], seed=a["seed"], repeat=True)
    held_out = noise.dataset(_examples(held_out_documents, tokenizer, a["sequence_length"]),
                             a["batch_size"], seed=a["seed"] + 1, shuffle=False).cache()
    log(f"Pretraining {a['model']} ({backbone.count_params():,} parameters) with bart for "
        f"{a['steps']} steps of {a['batch_size']} x {a['sequence_length']} on {keras.backend.backend()} ...")
    run.fit(lm, train, min(STEPS_PER_EPOCH, a["steps"]), callbacks, verbose=1 if log is print else 2)
    metrics = {"backend": keras.backend.backend(), "model": a["model"], "objective": "bart",
               "steps": a["steps"], "batch_size": a["batch_size"],
               "sequence_length": a["sequence_length"], "vocabulary_size": tokenizer.vocabulary_size,
               **_evaluation(lm, held_out, log), "wall_time_seconds": round(run.elapsed_seconds(), 1)}
    title = f"{a['model']}, bart: held-out token accuracy {metrics['held_out_token_accuracy']:.3f}"
    save_run(run, lm, metrics, title, OUTPUTS, log)
    demo(lm, tokenizer, noise, held_out, log)
    return metrics
