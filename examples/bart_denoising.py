"""Pretrain a tiny BART with its denoising objective, then show it sentences noised and reconstructed.

    KERAS_BACKEND=jax python examples/bart_denoising.py [--steps 1500] [--output runs/bart_denoising] [--smoke]

1. `kbert pretrain --objective bart` in Python (`run_pretraining`): a
   byte-level BPE learned on the main job's built-in corpus (the
   interpreter's reference documentation, standard-library docstrings and
   the BBC News training articles),
   a `bart_tiny` (2+2 layers, d 128) trained on `BartDenoising` batches
   (sentence permutation, then text infilling: 30% of the tokens in
   Poisson(3) spans, one `<mask>` per span), held-out loss and accuracy.
2. Noises a few held-out sentences afresh (one `BartDenoising` call each)
   and prints the model's greedy reconstruction beside the original.

`--smoke` runs the same steps at a fraction of the size (2 steps of 4 x 48
on 40 documents): a check that the script works.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

from kbert.pretraining import BartDenoising, bart_examples  # noqa: E402
from kbert.jobs.bart_objective import demo  # noqa: E402
from kbert.jobs.pretraining_run import HELD_OUT_EVERY, default_corpus, run_pretraining  # noqa: E402
from kbert.text import BytePairTokenizer  # noqa: E402

SEQUENCE_LENGTH = 48


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--output", default="runs/bart_denoising")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that the script runs")
    args = parser.parse_args()
    documents, sizes = default_corpus(), dict(steps=args.steps, batch_size=32, vocabulary_size=4000)
    if args.smoke:
        documents, sizes = documents[:40], dict(steps=2, batch_size=4, vocabulary_size=1000)
    metrics = run_pretraining(corpus=documents if args.smoke else None, output=args.output, model="bart_tiny",
                              objective="bart", sequence_length=SEQUENCE_LENGTH, learning_rate=1e-3, **sizes)
    print({name: metrics[name] for name in ("held_out_denoising_loss", "held_out_token_accuracy")})

    lm = keras.saving.load_model(os.path.join(args.output, "model.keras"))
    tokenizer = BytePairTokenizer(os.path.join(args.output, "vocab.json"),
                                  os.path.join(args.output, "merges.txt"), add_prefix_space=True)
    held_out = documents[HELD_OUT_EVERY - 1 :: HELD_OUT_EVERY]  # the run's held-out documents
    # Single sentences, noised with text infilling only, five seeds.
    sentences = [[s] for d in held_out for s in d.splitlines() if 8 <= len(s.split()) <= 20][:5]
    examples = bart_examples(sentences, tokenizer, SEQUENCE_LENGTH)
    noise = BartDenoising(SEQUENCE_LENGTH, tokenizer.mask_id, permute_sentences=0.0)
    demo(lm, tokenizer, noise.dataset(examples, batch_size=len(examples[0]), seed=7, shuffle=False),
         SEQUENCE_LENGTH, print, count=5)


if __name__ == "__main__":
    main()
