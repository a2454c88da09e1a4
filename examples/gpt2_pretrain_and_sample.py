"""Pretrain a tiny GPT-2 on the built-in corpus with the causal-LM objective, then sample from it.

    KERAS_BACKEND=jax python examples/gpt2_pretrain_and_sample.py [--steps 1500] [--output runs/gpt2_tiny]
        [--prompt "The return value is"] [--new-tokens 24] [--smoke]

1. Runs the main job as `kbert pretrain --model gpt2_tiny --objective clm`
   does (`run_pretraining`): a WordPiece vocabulary learned from the
   interpreter's bundled documentation and the BBC News training articles
   (`default_corpus()`), a GPT-2 of
   BERT-Tiny's size trained on next-token prediction, held-out next-token
   accuracy beside the most-frequent-token baseline, and greedy
   continuations of held-out sentences.
2. Loads the saved `kbert.tasks.CausalLM` and continues a few prompts of
   different lengths, in one left-padded batch, with each strategy of
   `kbert.generation.CausalLMGenerator`: greedy, temperature with top-k,
   top-p (nucleus) sampling, and beam search.

`--smoke` runs the same steps at a fraction of the size (2 steps of 4 x 32 on
40 documents, 4 new tokens): a check that the script works.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from kbert.jobs.pretraining_run import default_corpus, run_pretraining  # noqa: E402
from kbert.text import WordPieceTokenizer  # noqa: E402

PROMPTS = ("The return value is", "This module provides", "If the argument is omitted, the")
STRATEGIES = {
    "greedy": dict(strategy="greedy"),
    "top-k 20, temperature 0.8": dict(strategy="sample", top_k=20, temperature=0.8, seed=0),
    "top-p 0.9": dict(strategy="sample", top_p=0.9, seed=0),
    "beam search, 4 beams": dict(strategy="beam", num_beams=4),
}


def left_padded(tokenizer, prompts):
    """`{"token_ids", "padding_mask"}` of `[CLS] + prompt` for each prompt, padded on the left."""
    rows = [[tokenizer.cls_id, *ids] for ids in tokenizer(list(prompts))]
    width = max(map(len, rows))
    token_ids = np.full((len(rows), width), tokenizer.sep_id, "int32")
    padding_mask = np.zeros((len(rows), width), "int32")
    for row, ids in enumerate(rows):
        token_ids[row, width - len(ids) :] = ids
        padding_mask[row, width - len(ids) :] = 1
    return {"token_ids": token_ids, "padding_mask": padding_mask}


def continuation(tokenizer, ids):
    """The text of generated `ids` up to the end id ([SEP])."""
    ids = list(ids)
    end = ids.index(tokenizer.sep_id) if tokenizer.sep_id in ids else len(ids)
    return tokenizer.detokenize(ids[:end])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--output", default="runs/gpt2_tiny")
    parser.add_argument("--prompt", action="append", help="a prompt (repeatable); default: three")
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that the script runs")
    args = parser.parse_args()

    corpus, sizes = None, dict(steps=args.steps, batch_size=32, sequence_length=64, vocabulary_size=8000)
    if args.smoke:
        corpus, sizes = default_corpus()[:40], dict(steps=2, batch_size=4, sequence_length=32, vocabulary_size=1000)
        args.new_tokens = 4
    metrics = run_pretraining(corpus=corpus, output=args.output, model="gpt2_tiny", objective="clm",
                              learning_rate=2e-3, **sizes)
    print(f"\nHeld-out next-token accuracy {metrics['held_out_clm_accuracy']:.3f} "
          f"(always {metrics['most_frequent_token']!r}: {metrics['most_frequent_token_accuracy']:.3f})")

    model = keras.saving.load_model(os.path.join(args.output, "model.keras"))
    tokenizer = WordPieceTokenizer(os.path.join(args.output, "vocab.txt"), lowercase=True)
    prompts = args.prompt or PROMPTS
    inputs = left_padded(tokenizer, prompts)
    for name, options in STRATEGIES.items():
        generated = model.generate(inputs, max_new_tokens=args.new_tokens, **options)
        print(f"\n{name}:")
        for prompt, ids in zip(prompts, generated):
            print(f"  {prompt} | {continuation(tokenizer, ids)}")


if __name__ == "__main__":
    main()
