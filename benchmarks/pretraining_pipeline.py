"""Pretraining throughput: the data pipeline vs the model's training step, and the main job's wall time.

    KERAS_BACKEND=jax python benchmarks/pretraining_pipeline.py [--batch 32] [--length 128]
        [--model-batch 8] [--repeats 3] [--main-job-backends tensorflow jax torch]

The pipeline is `kbert.pretraining.pretraining_dataset` (MLM + NSP, dynamic
masking) on the built-in corpus with a WordPiece vocabulary learned from it:
raw text → sentences → NSP pairs → packing → masking → batches, timed over
one whole pass of the corpus from the start. The model step is one
training step of bert_base on a batch of that pipeline, on the current
backend, for each system, timed in turns (median of `--repeats`, after a
warm-up that pays compilation), as tokens per second:

- kbert: `BertPretrainer(bert_base())`, MLM + NSP heads, kbert's AdamW; the MLM head
  runs at the masked positions only;
- KerasHub: `BertMaskedLM` over a same-size `BertBackbone` (MLM only, no NSP
  head: KerasHub has none), Keras' AdamW;
- transformers (torch only): `BertForPreTraining` (MLM + NSP, sdpa attention,
  the MLM head over every position), `torch.optim.AdamW`.

The pipeline must produce examples at least 5× as fast as kbert's step
consumes them, or it starves the model. Then the main job
(`kbert pretrain` with its defaults) runs once per backend in its own process;
`--main-job-backends` with no names skips it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import kbert  # noqa: E402  (imports Keras quietly)
import keras  # noqa: E402
from encoder_throughput import SIZE, keras_adamw, median_times  # noqa: E402

from kbert.backend.imports import quiet_import  # noqa: E402
from kbert.pretraining import BertPretrainer, create_optimizer, pretraining_dataset  # noqa: E402
from kbert.jobs.pretraining_run import default_corpus  # noqa: E402

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


def _optimizer():
    return create_optimizer("adamw", 1e-4, total_steps=1000, warmup_steps=100)


def kbert_step(x, y):
    model = BertPretrainer(kbert.models.bert_base(), pair_objective="nsp")
    model.compile(optimizer=_optimizer())
    return lambda: model.train_on_batch(x, y)


def keras_hub_step(x, y):
    keras_hub = quiet_import("keras_hub")  # it imports TensorFlow: keep its start-up lines quiet
    backbone = keras_hub.models.BertBackbone(max_sequence_length=512, num_segments=2, dropout=0.1, **SIZE)
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    model.compile(optimizer=keras_adamw(1e-4), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[])
    inputs = {name: x[name] for name in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
    return lambda: model.train_on_batch(inputs, y["mask_ids"], sample_weight=y["mask_weights"])


def transformers_step(x, y):
    import torch
    import transformers

    model = transformers.BertForPreTraining(transformers.BertConfig(attn_implementation="sdpa")).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    labels = np.full(x["token_ids"].shape, -100)  # the masked positions' ids; -100 elsewhere
    rows, slots = np.nonzero(y["mask_weights"])
    labels[rows, x["mask_positions"][rows, slots]] = y["mask_ids"][rows, slots]
    batch = {"input_ids": x["token_ids"], "token_type_ids": x["segment_ids"], "attention_mask": x["padding_mask"],
             "labels": labels, "next_sentence_label": y["pair_labels"]}
    batch = {name: torch.tensor(np.asarray(value), dtype=torch.long) for name, value in batch.items()}

    def step():
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()

    return step


def model_rates(example, batch, repeats):
    """`{system: step seconds}` of a bert_base pretraining step on `batch` rows of `example`."""
    x, y = keras.tree.map_structure(lambda t: np.asarray(t)[:batch], example)
    steps = {"kbert BertPretrainer (MLM + NSP)": kbert_step(x, y),
             "KerasHub BertMaskedLM (MLM)": keras_hub_step(x, y)}
    if keras.backend.backend() == "torch":
        steps["transformers BertForPreTraining (MLM + NSP)"] = transformers_step(x, y)
    return median_times(steps, repeats)


def print_model_table(times, batch, length):
    ours = times["kbert BertPretrainer (MLM + NSP)"]
    print(f"\n| bert_base pretraining step, batch {batch} x {length} | step (s) | tokens/s | kbert's speed-up |")
    print("|---|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds:.2f} | {batch * length / seconds:.0f} | {seconds / ours:.2f}x |")


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
    times = model_rates(example, args.model_batch, args.repeats)
    step = times["kbert BertPretrainer (MLM + NSP)"]
    model = args.model_batch / step
    ratio = pipeline / model

    backend = keras.backend.backend()
    print(f"\nMLM + NSP pretraining at length {args.length}, float32, backend {backend}\n")
    print("| stage | examples/s | note |")
    print("|---|---|---|")
    print(f"| data pipeline (tf.data, batch {args.batch}) | {pipeline:10.1f} | text → masked batches |")
    print(f"| bert_base training step (batch {args.model_batch}) | {model:10.2f} | {step:.2f} s per step |")
    verdict = "ok" if ratio >= REQUIRED_RATIO else f"TOO SLOW (needs {REQUIRED_RATIO:.0f}x)"
    print(f"\npipeline / model = {ratio:.0f}x ({verdict})")
    print_model_table(times, args.model_batch, args.length)

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
