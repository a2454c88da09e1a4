"""Forward time and peak memory of dense, BigBird and Longformer attention against the length.

    KERAS_BACKEND=jax python benchmarks/long_attention.py [--lengths 512 1024 ...] [--models layer base]

Batch 1, hidden 768, 12 heads: one encoder block (`layer`) and a whole
base-size encoder (`base`: 12 blocks, embeddings, pooler), in inference mode,
compiled with XLA on TensorFlow and JAX, eager on PyTorch.

Every (model, attention, length) runs in a fresh child process. It builds
the model, calls it once (compilation; not timed), then times `--repeats`
calls (median). Peak memory is what the calls add to the resident size
after the build: the child resets the kernel's high-water mark
(`/proc/self/clear_refs`) once built and reads it (`VmHWM`) at the end, so
allocator reuse cannot hide a transient n×n score tensor, and it includes
what compiling the forward pass needs. The children run with glibc's mmap
threshold fixed at 128 KiB (`MALLOC_MMAP_THRESHOLD_`): every tensor over it
is mapped on allocation and unmapped when freed, so the peak is that of
live memory. With glibc's default the threshold rises to the largest block
freed (up to 32 MiB), later tensors come from the heap, and its
fragmentation made the same dense forward read 110 MB in one run and 290 MB
in the next (and the base model's peak fell below that of its build).

Dense attention is `keras.ops.dot_product_attention`: PyTorch's fused
`scaled_dot_product_attention` on PyTorch; on JAX and TensorFlow on CPU, XLA
materializes the n×n scores. A dense run is skipped where, from the previous
length and quadratic growth, it would take over `--dense-limit` seconds (the
call and its warm-up); any child past `--timeout` seconds is recorded as
skipped, and lengths beyond `--budget` seconds of total run time are not run.
BigBird: blocks of 64, 3 random blocks; Longformer: one-sided window 256 with
the first token global.

Writes `benchmarks/results/long_attention_<backend>.md` (a table per model,
and whether the targets were met) and `long_attention_<backend>.png`
(log-log time and memory against the length).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ATTENTIONS = {
    "dense": {},
    "bigbird": {"block_size": 64, "num_random_blocks": 3},
    "longformer": {"window": 256},
}
LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]


def build(attention, length, model):
    """The model and a function running one forward pass on batch-1 inputs."""
    import keras
    import numpy as np

    import kbert

    backend = keras.backend.backend()
    kwargs = ATTENTIONS[attention]
    rng = np.random.default_rng(0)
    global_mask = np.eye(1, length, dtype="int32")  # the first token
    if model == "layer":
        attention_layer = kbert.models.ATTENTION_LAYERS[attention](num_heads=12, key_dim=64, **kwargs)
        target = kbert.layers.EncoderBlock(12, 3072, dropout=0.0, attention_layer=attention_layer)
        inputs = {
            "inputs": rng.normal(size=(1, length, 768)).astype("float32"),
            "padding_mask": np.ones((1, length), "int32"),
        }
        if attention == "longformer":
            inputs["global_attention_mask"] = global_mask
        target.build((1, length, 768))
    else:
        target = kbert.models.Encoder(
            vocabulary_size=30522,
            num_layers=12,
            num_heads=12,
            hidden_dim=768,
            intermediate_dim=3072,
            max_positions=max(512, length),
            dropout=0.0,
            attention=attention,
            attention_kwargs=kwargs,
        )
        ids = rng.integers(1, 30522, (1, length)).astype("int32")
        features = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
        if attention == "longformer":
            features["global_attention_mask"] = global_mask
        inputs = {"inputs": features}

    if backend == "jax":
        import jax

        state = (
            [v.value for v in target.trainable_variables],
            [v.value for v in target.non_trainable_variables],
        )
        jitted = jax.jit(lambda s, i: target.stateless_call(s[0], s[1], **i, training=False)[0])
        return lambda: jax.block_until_ready(jitted(state, inputs))
    if backend == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(lambda i: target(**i, training=False), jit_compile=True)
        return lambda: keras.tree.map_structure(lambda x: x.numpy(), compiled(inputs))
    import torch

    def forward():
        with torch.no_grad():
            return keras.tree.map_structure(lambda x: x.cpu().numpy(), target(**inputs, training=False))

    return forward


def resident_mb(field):
    """`VmRSS` (resident now) or `VmHWM` (its peak since the last reset) of this process, in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(job):
    """Runs in the child: build, warm up and time; prints JSON with the time and the peak added."""
    forward = build(job["attention"], job["length"], job["model"])
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # the high-water mark starts again from the resident size
    resident = resident_mb("VmRSS")
    start = time.perf_counter()
    forward()
    warm_up = time.perf_counter() - start
    times = []
    for _ in range(job["repeats"]):
        start = time.perf_counter()
        forward()
        times.append(time.perf_counter() - start)
    peak = resident_mb("VmHWM") - resident
    print(json.dumps({"time_s": statistics.median(times), "warm_up_s": warm_up, "peak_mb": peak}))


def measure(model, attention, length, repeats, timeout):
    """The child's result (a dict), or a "skipped"/"failed" note."""
    job = {"model": model, "attention": attention, "length": length, "repeats": repeats}
    command = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(job)]
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"skipped (> {timeout} s)"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    errors = done.stderr.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"failed ({errors[-1][:80] if errors else done.returncode})"
    return json.loads(lines[-1])


def dense_label(backend):
    return "dense (fused SDPA)" if backend == "torch" else "dense (materialized n×n)"


def cell(result):
    if isinstance(result, str):
        return result
    return f"{result['time_s']:.3f} s / {result['peak_mb']:.0f} MB"


def target_notes(rows, model, lengths, backend):
    """Plain statements of the issue's targets, from the measured numbers.

    Memory: at most a quarter of dense's where dense materializes the n×n
    scores, at most twice fused dense's (PyTorch), which keeps none.
    """
    notes = []
    dense = rows.get((model, "dense", 4096))
    factor, bound = (2, "at most twice") if backend == "torch" else (0.25, "at most a quarter")
    for attention in ("bigbird", "longformer"):
        sparse = rows.get((model, attention, 4096))
        if isinstance(dense, dict) and isinstance(sparse, dict):
            memory = sparse["peak_mb"] <= dense["peak_mb"] * factor
            faster = sparse["time_s"] < dense["time_s"]
            notes.append(
                f"{attention} at 4096: peak {sparse['peak_mb']:.0f} MB vs dense "
                f"{dense['peak_mb']:.0f} MB ({'met' if memory else 'MISSED'}: {bound}), "
                f"time {sparse['time_s']:.3f} s vs {dense['time_s']:.3f} s "
                f"({'met' if faster else 'MISSED'}: less time)."
            )
        else:
            notes.append(f"{attention} at 4096: no comparison (a run is missing).")
        measured = [n for n in lengths if isinstance(rows.get((model, attention, n)), dict)]
        if len(measured) >= 2:
            first, last = measured[0], measured[-1]
            growth = rows[(model, attention, last)]["time_s"] / rows[(model, attention, first)]["time_s"]
            notes.append(
                f"{attention} time from {first} to {last} tokens: x{growth:.1f} "
                f"(linear would be x{last / first:.0f}, quadratic x{(last / first) ** 2:.0f})."
            )
    return notes


def write_results(backend, rows, models, lengths, elapsed, note=""):
    os.makedirs(RESULTS, exist_ok=True)
    names = {"dense": dense_label(backend), "bigbird": "BigBird", "longformer": "Longformer"}
    lines = [
        f"# Long-sequence attention on {backend} (CPU)",
        "Forward time (median) / peak resident memory added by the forward pass "
        "(the child's resident high-water mark over its size once built; glibc's mmap threshold "
        "fixed at 128 KiB, so freed tensors go back to the system). Batch 1, hidden 768, 12 heads.",
    ]
    for model in models:
        title = "one encoder layer" if model == "layer" else "base model (12 layers)"
        lines += [f"\n## {title}\n", "| n | " + " | ".join(names.values()) + " |", "|---|---|---|---|"]
        for length in lengths:
            lines.append(
                f"| {length} | "
                + " | ".join(cell(rows.get((model, a, length), "not run (time budget)")) for a in ATTENTIONS)
                + " |"
            )
        lines += ["", "Targets:"] + [f"- {item}" for item in target_notes(rows, model, lengths, backend)]
    lines.append(f"\nTotal benchmark wall time {elapsed:.0f} s. {note}".rstrip())
    path = os.path.join(RESULTS, f"long_attention_{backend}.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(backend, rows, models, lengths, names, path.replace(".md", ".png"))


def plot(backend, rows, models, lengths, names, output):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = {"layer": "-", "base": "--"}
    for model in models:
        for attention in ATTENTIONS:
            points = [
                (n, rows[(model, attention, n)])
                for n in lengths
                if isinstance(rows.get((model, attention, n)), dict)
            ]
            if not points:
                continue
            n = [p[0] for p in points]
            label = f"{names[attention]}, {model}"
            axes[0].loglog(n, [p[1]["time_s"] for p in points], styles[model], marker="o", label=label)
            memory = [max(p[1]["peak_mb"], 1.0) for p in points]
            axes[1].loglog(n, memory, styles[model], marker="o", label=label)
    for ax, title in zip(axes, ["forward time (s)", "peak memory added (MB)"]):
        ax.set_xlabel("sequence length n")
        ax.set_title(f"{backend}: {title}")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(output, dpi=110)
    print(f"wrote {output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    parser.add_argument("--models", nargs="+", choices=["layer", "base"], default=["layer", "base"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dense-limit", type=float, default=60.0)
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument("--budget", type=float, default=600.0)
    parser.add_argument("--note", default="", help="a line for the table, e.g. the machine's load")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    import keras

    backend = keras.backend.backend()
    start = time.monotonic()
    rows = {}
    for model in args.models:
        for attention in ATTENTIONS:
            previous = None
            for length in args.lengths:
                if time.monotonic() - start > args.budget:
                    break
                growth = 4 if attention == "dense" else 2  # quadratic or linear
                if isinstance(previous, dict):
                    expected = previous["time_s"] * growth * (1 + args.repeats)
                    if attention == "dense" and expected > args.dense_limit:
                        rows[(model, attention, length)] = f"skipped (~{expected:.0f} s expected)"
                        continue
                elif previous is not None:  # the shorter length was skipped or failed
                    rows[(model, attention, length)] = "skipped (shorter length did not finish)"
                    continue
                previous = measure(model, attention, length, args.repeats, args.timeout)
                rows[(model, attention, length)] = previous
                print(f"{model} {attention} {length}: {cell(previous)}", flush=True)
    write_results(backend, rows, args.models, args.lengths, time.monotonic() - start, args.note)


if __name__ == "__main__":
    main()
