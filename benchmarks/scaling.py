"""Data-parallel scaling on JAX: step time, tokens/s and all-reduced bytes over 1, 2 and 4 devices.

    python benchmarks/scaling.py [--model bert_tiny] [--batch 32] [--length 128] [--steps 5] [--devices 1 2 4]

Each device count runs in a fresh process (`XLA_FLAGS=--xla_force_host_platform_device_count=N`
must be set before JAX starts) that trains a `BertPretrainer` (MLM + NSP)
under `kbert.distribute.DistributedTraining` (`keras.distribution.DataParallel`)
at the same global batch, after one untimed step that pays compilation, and
reports the median step time. The bytes all-reduced per step are the float32
gradients of every trainable variable (one all-reduce of each per step; a
ring moves `2 (N - 1) / N` of them in and out of each device). The reference
is the 1-device run of the same invocation: `speed-up` is its step time over
this one's. On one CPU the virtual devices share the same cores, so no
speed-up is expected here; the paper estimate for accelerators is in
`benchmarks/results/scaling.md`.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def measure(model, batch, length, steps):
    """In this process: `{devices, step_seconds, tokens_per_second, allreduce_bytes}`."""
    import keras
    import numpy as np

    import kbert
    from kbert.distribute import DistributedTraining

    distributed = DistributedTraining("data" if len(keras.distribution.list_devices()) > 1 else "none",
                                      batch_size=batch)
    rng = np.random.default_rng(0)
    vocabulary, predictions = 1000, max(length * 15 // 100, 1)
    x = {"token_ids": rng.integers(5, vocabulary, (batch, length)).astype("int32"),
         "segment_ids": np.zeros((batch, length), "int32"), "padding_mask": np.ones((batch, length), "int32"),
         "mask_positions": np.sort(rng.integers(1, length, (batch, predictions)), axis=1).astype("int32")}
    y = {"mask_ids": rng.integers(5, vocabulary, (batch, predictions)).astype("int32"),
         "mask_weights": np.ones((batch, predictions), "float32"),
         "pair_labels": rng.integers(0, 2, (batch,)).astype("int32")}
    with distributed.scope(model):
        pretrainer = kbert.pretraining.BertPretrainer(kbert.models.build(model, vocabulary_size=vocabulary,
                                                                         max_positions=max(length, 128)))
        pretrainer.compile(optimizer=keras.optimizers.AdamW(1e-4))
        pretrainer.train_on_batch(x, y)  # compiles
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            pretrainer.train_on_batch(x, y)
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    gradient_bytes = 4 * sum(int(np.prod(v.shape)) for v in pretrainer.trainable_variables)
    return {"devices": distributed.replicas, "step_seconds": step, "tokens_per_second": batch * length / step,
            "allreduce_bytes": gradient_bytes if distributed.replicas > 1 else 0}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert_tiny")
    parser.add_argument("--batch", type=int, default=32, help="the global batch")
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.model, args.batch, args.length, args.steps)))
        return
    rows = []
    for count in args.devices:
        env = dict(os.environ, KERAS_BACKEND="jax",
                   XLA_FLAGS=f"--xla_force_host_platform_device_count={count}")
        command = [sys.executable, __file__, "--child", "--model", args.model, "--batch", str(args.batch),
                   "--length", str(args.length), "--steps", str(args.steps)]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    reference = rows[0]["step_seconds"]
    print(f"{args.model}, global batch {args.batch} x {args.length}, JAX virtual CPU devices, "
          f"median of {args.steps} steps\n")
    print("| devices | step (ms) | tokens/s | speed-up vs 1 device | all-reduced per step (MB) | "
          "ring traffic per device (MB) |")
    print("|--------:|----------:|---------:|---------------------:|--------------------------:|"
          "-----------------------------:|")
    for row in rows:
        count, volume = row["devices"], row["allreduce_bytes"] / 1e6
        ring = 2 * (count - 1) / count * volume if count > 1 else 0.0
        print(f"| {count} | {1000 * row['step_seconds']:.1f} | {row['tokens_per_second']:,.0f} | "
              f"{reference / row['step_seconds']:.2f} | {volume:.2f} | {ring:.2f} |")


if __name__ == "__main__":
    main()
