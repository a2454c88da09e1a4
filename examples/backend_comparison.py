"""One model, three backends: same outputs, and which backend is fastest here.

    python examples/backend_comparison.py [--backends tensorflow jax torch] [--steps 5] [--smoke]

Builds three small models once, on the first backend: a BERT (MLM + NSP
pretrainer on `bert_tiny`), a BigBird (block-sparse attention at length 256)
and a T5 (v1.1, 2+2 layers, in the `Seq2SeqLM` task that owns its loss), and saves them as `.keras` files with one batch
of inputs. Then each backend, in its own process, loads the same files and
measures:

- the largest absolute difference of its float32 outputs from the first
  backend's (BERT/BigBird pretrainer `mlm_logits`, T5 `logits`); the script fails
  when one exceeds 1e-4;
- forward time: `predict_on_batch`, compiled (XLA on TensorFlow and JAX,
  eager on PyTorch), median of `--steps` calls after a warm-up call;
- training-step time: `train_on_batch` with Adam, compiled the same way,
  median of `--steps` steps after a warm-up step (which compiles);
- peak memory: the process' peak resident set size (framework included).

It prints a table, names the fastest backend for each model, and writes
`backend_comparison.md`, `.json` and `.png` (bar charts) to `--output`.
`--smoke` runs the same steps at a fraction of the size (sequences of 32,
BigBird's of 64 in blocks of 8, one timed call): a check that the script works,
not a measurement.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

MODELS = ("bert", "bigbird", "t5")
TOLERANCE = 1e-4
BATCH = 4
ENCODER = dict(num_layers=2, hidden_dim=128, num_heads=2, intermediate_dim=512, dropout=0.0)


def sequence_length(name, smoke):
    if name == "bigbird":
        return 64 if smoke else 256
    return 32 if smoke else 128


def inputs_for(name, vocabulary_size, smoke):
    """Model inputs and training targets for `name`, from a fixed seed."""
    rng = np.random.default_rng(0)
    length = sequence_length(name, smoke)
    targets = min(length, 32)
    ids = rng.integers(5, vocabulary_size, (BATCH, length)).astype("int32")
    mask = np.ones((BATCH, length), "int32")
    if name == "t5":
        x = {
            "encoder_token_ids": ids,
            "encoder_padding_mask": mask,
            "decoder_token_ids": ids[:, :targets],
            "decoder_padding_mask": mask[:, :targets],
        }
        return x, rng.integers(2, vocabulary_size, (BATCH, targets)).astype("int32")
    predictions = min(20, length // 4)
    x = {
        "token_ids": ids,
        "segment_ids": np.zeros_like(ids),
        "padding_mask": mask,
        "mask_positions": rng.integers(1, length, (BATCH, predictions)).astype("int32"),
    }
    y = {
        "mask_ids": rng.integers(5, vocabulary_size, (BATCH, predictions)).astype("int32"),
        "mask_weights": np.ones((BATCH, predictions), "float32"),
        "pair_labels": rng.integers(0, 2, (BATCH,)).astype("int32"),
    }
    return x, y


def build_models(folder, smoke):
    """Build, save (`<name>.keras`) and store inputs (`<name>_data.npz`) of the three models."""
    import kbert
    from kbert.pretraining import BertPretrainer
    from kbert.tasks import Seq2SeqLM

    models = {
        "bert": BertPretrainer(kbert.models.bert_tiny(**ENCODER)),
        "bigbird": BertPretrainer(
            kbert.models.bigbird_base(
                **ENCODER,
                vocabulary_size=30522,
                max_positions=sequence_length("bigbird", smoke),
                attention_kwargs={"block_size": 8 if smoke else 32, "num_random_blocks": 2},
            )
        ),
        "t5": Seq2SeqLM(kbert.models.t5_v1_1_small(
            num_layers=2, hidden_dim=128, num_heads=2, key_dim=64, intermediate_dim=512,
            vocabulary_size=8000, dropout=0.0,
        )),
    }
    for name, model in models.items():
        model.save(os.path.join(folder, f"{name}.keras"))
        x, y = inputs_for(name, model.backbone.vocabulary_size, smoke)
        targets = y if isinstance(y, dict) else {"target_ids": y}
        np.savez(
            os.path.join(folder, f"{name}_data.npz"),
            **{f"x_{k}": v for k, v in x.items()},
            **{f"y_{k}": v for k, v in targets.items()},
        )


def _median_seconds(fn, steps):
    fn()  # warm-up: compiles
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(folder, steps):
    """Load each saved model on this process' backend; outputs and timings."""
    import resource

    import keras

    import kbert.pretraining  # noqa: F401  (registers the kbert classes for loading)

    backend = keras.backend.backend()
    results = {}
    for name in MODELS:
        model = keras.saving.load_model(os.path.join(folder, f"{name}.keras"), compile=False)
        data = np.load(os.path.join(folder, f"{name}_data.npz"))
        x = {k[2:]: data[k] for k in data.files if k.startswith("x_")}
        y = {k[2:]: data[k] for k in data.files if k.startswith("y_")}
        y = y["target_ids"] if name == "t5" else y
        model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=backend != "torch")
        outputs = model.predict_on_batch(x)
        outputs = outputs if name == "t5" else outputs["mlm_logits"]  # Seq2SeqLM: the logits alone
        np.save(os.path.join(folder, f"{name}_{backend}.npy"), np.asarray(outputs, "float32"))
        forward = _median_seconds(lambda: model.predict_on_batch(x), steps)
        train = _median_seconds(lambda: model.train_on_batch(x, y), steps)
        results[name] = {"forward_ms": 1000 * forward, "train_step_ms": 1000 * train}
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"backend": backend, "models": results, "peak_rss_mb": peak_mb}


def run_backend(backend, mode, folder, steps, smoke):
    env = dict(os.environ, KERAS_BACKEND=backend)
    command = [sys.executable, __file__, "--worker", mode, "--folder", folder, "--steps", str(steps)]
    command += ["--smoke"] if smoke else []
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{backend} {mode} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def report(runs, folder, output):
    """The table (Markdown), the winners, the chart; fails on a difference over TOLERANCE."""
    first = runs[0]["backend"]
    header = (
        "| model | backend | max abs diff vs " + first + " | forward (ms) | train step (ms) "
        "| peak RSS (MB) |\n|---|---|---|---|---|---|"
    )
    rows, worst = [header], 0.0
    for name in MODELS:
        reference = np.load(os.path.join(folder, f"{name}_{first}.npy"))
        for run in runs:
            outputs = np.load(os.path.join(folder, f"{name}_{run['backend']}.npy"))
            difference = float(np.abs(outputs - reference).max())
            worst = max(worst, difference)
            m = run["models"][name]
            rows.append(
                f"| {name} | {run['backend']} | {difference:.2e} | {m['forward_ms']:.1f} "
                f"| {m['train_step_ms']:.1f} | {run['peak_rss_mb']:.0f} |"
            )
    lines = ["\n".join(rows), ""]
    for name in MODELS:
        for metric, label in (("train_step_ms", "training step"), ("forward_ms", "forward")):
            best = min(runs, key=lambda run: run["models"][name][metric])
            lines.append(
                f"- {name}: fastest {label} on this machine: {best['backend']} "
                f"({best['models'][name][metric]:.1f} ms)"
            )
    lines.append(
        f"\nLargest output difference between backends: {worst:.2e} (limit {TOLERANCE:g}, float32)."
    )
    text = "\n".join(lines)
    print(text)
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "backend_comparison.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(output, "backend_comparison.json"), "w") as f:
        json.dump(runs, f, indent=2)
    chart(runs, os.path.join(output, "backend_comparison.png"))
    if worst > TOLERANCE:
        sys.exit(f"Backends differ by {worst:.2e} > {TOLERANCE:g}.")


def chart(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / len(runs)
    positions = np.arange(len(MODELS))
    for ax, metric, title in (
        (axes[0], "forward_ms", "Forward (predict_on_batch), ms"),
        (axes[1], "train_step_ms", "Training step (train_on_batch), ms"),
    ):
        for i, run in enumerate(runs):
            values = [run["models"][name][metric] for name in MODELS]
            ax.bar(positions + i * width, values, width, label=run["backend"])
        ax.set_xticks(positions + width * (len(runs) - 1) / 2, MODELS)
        ax.set_title(title)
        ax.set_yscale("log")
    axes[0].legend()
    figure.suptitle(f"kbert, batch {BATCH}, float32, CPU (median of timed calls)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"Saved {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax", "torch"])
    parser.add_argument("--steps", type=int, default=5, help="timed calls per measurement")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "results"))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one timed call: check that it runs")
    parser.add_argument("--worker", choices=["build", "measure"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "build":
        build_models(args.folder, args.smoke)
        print(json.dumps({}))
        return
    if args.worker == "measure":
        print(json.dumps(measure(args.folder, args.steps)))
        return
    unknown = set(args.backends) - {"tensorflow", "jax", "torch"}
    if unknown:
        parser.error(f"Unknown backend(s): {', '.join(sorted(unknown))}.")
    steps = 1 if args.smoke else args.steps
    with tempfile.TemporaryDirectory() as folder:
        run_backend(args.backends[0], "build", folder, steps, args.smoke)
        runs = []
        for backend in args.backends:
            print(f"Running {backend} ...", flush=True)
            runs.append(run_backend(backend, "measure", folder, steps, args.smoke))
        report(runs, folder, args.output)


if __name__ == "__main__":
    main()
