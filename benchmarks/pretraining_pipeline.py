"""Pretraining throughput: the data pipeline vs the model's training step, and the main job's wall time.

    KERAS_BACKEND=jax python benchmarks/pretraining_pipeline.py [--batch 32] [--length 128]
        [--model-batch 8] [--repeats 3] [--main-job-backends tensorflow jax torch]

The pipeline is `kbert.pretraining.pretraining_dataset` (MLM + NSP, dynamic
masking) on the built-in corpus with a WordPiece vocabulary learned from it:
raw text → sentences → NSP pairs → packing → masking → batches, timed over
one whole pass of the corpus from the start. The model step is one
`train_on_batch` of `BertPretrainer(bert_base())` (MLM + NSP heads, AdamW) at
the same length, on the current backend, median of `--repeats` after a warm-up
that pays compilation. The pipeline must produce examples at least 5× as fast
as the step consumes them, or it starves the model. Then the main job
(`kbert pretrain` with its defaults) runs once per backend in its own process;
`--main-job-backends` with no names skips it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import kbert  # noqa: E402  (imports Keras quietly)
import keras  # noqa: E402
from kbert.pretraining import BertPretrainer, create_optimizer, pretraining_dataset  # noqa: E402
from kbert.pretraining.pretraining_run import default_corpus  # noqa: E402

REQUIRED_RATIO = 5.0


def pipeline_rate(documents, tokenizer, batch, length):
    """Examples per second of the pipeline over one whole pass of the corpus, start-up included.

    A whole pass, because the shuffle buffer (10,000 instances, more than the
    built-in corpus yields) makes the first batch wait for every instance: the
    time from start to the last batch is the honest cost of text → batches.
    """
    dataset = pretraining_dataset(documents, tokenizer, objective="mlm_nsp", sequence_length=length,
                                  batch_size=batch, seed=0, repeat=False)
    start = time.perf_counter()
    batches = list(dataset)
    return len(batches) * batch / (time.perf_counter() - start), batches[0]


def model_rate(example, batch, repeats):
    """Examples per second of a bert_base MLM + NSP training step, and the step's seconds."""
    x, y = keras.tree.map_structure(lambda t: np.asarray(t)[:batch], example)
    model = BertPretrainer(kbert.models.bert_base(), pair_objective="nsp")
    model.compile(optimizer=create_optimizer("adamw", 1e-4, total_steps=1000, warmup_steps=100))
    model.train_on_batch(x, y)  # warm-up: tracing and compilation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    step = statistics.median(times)
    return batch / step, step


def main_job_time(backend):
    """Wall time of `kbert pretrain` with its defaults on `backend`, in a fresh process."""
    with tempfile.TemporaryDirectory() as output:
        command = [sys.executable, "-m", "kbert", "pretrain", "--output", output]
        start = time.perf_counter()
        subprocess.run(command, env={**os.environ, "KERAS_BACKEND": backend}, check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        with open(os.path.join(output, "metrics.json")) as f:
            metrics = json.load(f)
    return wall, metrics


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="pipeline batch size")
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--model-batch", type=int, default=8, help="training-step batch size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--main-job-backends", nargs="*", default=["tensorflow", "jax", "torch"])
    args = parser.parse_args()
    from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary

    documents = default_corpus()
    tokens = learn_word_piece_vocabulary(documents, args.vocabulary_size)
    tokenizer = WordPieceTokenizer(tokens, lowercase=True)
    pipeline, example = pipeline_rate(documents, tokenizer, args.batch, args.length)
    model, step = model_rate(example, args.model_batch, args.repeats)
    ratio = pipeline / model

    backend = keras.backend.backend()
    print(f"\nMLM + NSP pretraining at length {args.length}, float32, backend {backend}\n")
    print("| stage | examples/s | note |")
    print("|---|---|---|")
    print(f"| data pipeline (tf.data, batch {args.batch}) | {pipeline:10.1f} | text → masked batches |")
    print(f"| bert_base training step (batch {args.model_batch}) | {model:10.2f} | {step:.2f} s per step |")
    verdict = "ok" if ratio >= REQUIRED_RATIO else f"TOO SLOW (needs {REQUIRED_RATIO:.0f}x)"
    print(f"\npipeline / model = {ratio:.0f}x ({verdict})")

    if args.main_job_backends:
        print("\n| main job (`kbert pretrain`, defaults) | wall time (s) | held-out MLM acc. "
              "| most-frequent-token acc. |")
        print("|---|---|---|---|")
        for name in args.main_job_backends:
            wall, metrics = main_job_time(name)
            print(f"| {name} | {wall:.0f} | {metrics['held_out_mlm_accuracy']:.3f} "
                  f"| {metrics['most_frequent_token_accuracy']:.3f} |")


if __name__ == "__main__":
    main()
