"""XLNet's held-out evaluation on PyTorch against JAX: the `plm` run's `evaluate`, timed on each backend.

    python benchmarks/xlnet_evaluation.py [--documents 400] [--batch 32] [--length 64] [--backends jax torch]

Each backend runs in its own process: a WordPiece vocabulary learned from the first `--documents` of the
built-in corpus, `pretraining_dataset(objective="plm", masking="static")` over them (XLNet's permutation
masks and target mappings, as `kbert pretrain --objective plm` evaluates), `XLNetPretrainer(xlnet_tiny)`
compiled as the job compiles it (`jit_compile="auto"`), one warm-up batch, then `evaluate` over every
batch, timed. JAX is the reference: the table prints PyTorch's time over JAX's (the goal: within 3x).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "xlnet_evaluation.md"


def _measure(documents, batch, length):
    """`{"batches", "seconds"}` of one held-out evaluation on this process's backend."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    import kbert
    from kbert.jobs.pretraining_run import default_corpus
    from kbert.pretraining import XLNetPretrainer, pretraining_dataset
    from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary

    corpus = default_corpus()[:documents]
    tokenizer = WordPieceTokenizer(learn_word_piece_vocabulary(corpus, 4000), lowercase=True)
    held_out = pretraining_dataset(corpus, tokenizer, objective="plm", sequence_length=length, batch_size=batch,
                                   masking="static", repeat=False, seed=1).cache()
    batches = sum(1 for _ in held_out)
    model = XLNetPretrainer(kbert.models.xlnet_tiny(vocabulary_size=tokenizer.vocabulary_size))
    model.compile(optimizer="adam", jit_compile="auto")
    model.evaluate(held_out.take(1), verbose=0)  # compiles (JAX), builds
    start = time.perf_counter()
    model.evaluate(held_out, steps=batches, verbose=0)
    return {"backend": keras.backend.backend(), "batches": batches, "seconds": time.perf_counter() - start}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--backends", nargs="+", default=["jax", "torch"])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_measure(args.documents, args.batch, args.length)))
        return
    rows = {}
    for backend in args.backends:
        done = subprocess.run([sys.executable, __file__, "--worker", "--documents", str(args.documents), "--batch",
                               str(args.batch), "--length", str(args.length)], capture_output=True, text=True,
                              check=True, env={**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)})
        rows[backend] = json.loads(done.stdout.strip().splitlines()[-1])
    reference = rows.get("jax", {}).get("seconds")
    lines = ["# XLNet held-out evaluation (`XLNetPretrainer(xlnet_tiny)`, `plm` batches)", "",
             f"`python benchmarks/xlnet_evaluation.py --documents {args.documents} --batch {args.batch} --length "
             f"{args.length}`; {os.cpu_count()} CPU cores, each backend in its own process.", "",
             "| backend | batches | evaluate (s) | ms per batch | / JAX |", "|---|---|---|---|---|"]
    for backend, row in rows.items():
        ratio = f"{row['seconds'] / reference:.2f}x" if reference else "—"
        lines.append(f"| {backend} | {row['batches']} | {row['seconds']:.2f} | "
                     f"{1000 * row['seconds'] / row['batches']:.0f} | {ratio} |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
