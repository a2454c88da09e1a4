"""bert_base throughput: kbert vs keras-hub (and transformers on torch), one backend per run.

    KERAS_BACKEND=jax python benchmarks/encoder_throughput.py [--batch 8] [--length 128] [--repeats 3]
        [--isolated]

Times the forward pass (`predict_on_batch`, compiled where the backend compiles)
and one training step (`train_on_batch`: backbone + Dense(2) on the pooled
output, Adam, cross-entropy) of the same-size random model, after a warm-up
call that pays compilation, the systems timed in turns, each timed call
right after an untimed one of the same system (see `median_times`). Each steps with its
own library's Adam: kbert's `AdamW` (weight decay 0; one fused kernel on
torch), Keras' `Adam` for keras-hub, `torch.optim.Adam` for transformers, at
its default (a per-tensor loop on the CPU) and with `fused=True`. Reports the median of
`--repeats` runs, the ratio of each peer's time to kbert's (> 1: kbert is
faster), and the forward time against the machine's float32 matmul floor
measured in the same run.

By default the systems share one process, so each inherits the state of the
memory allocator the others leave: glibc hands freed heap back to the system
and a bert_base forward then pays 15–60k page faults (20–60 ms here),
depending on which system ran before. `--isolated` times each system in a
process of its own, one after another, as a user runs one of them.
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import kbert  # noqa: E402  (imports Keras quietly)
import keras  # noqa: E402
from kbert.backend.imports import quiet_import  # noqa: E402
from kbert.training.optimizers import NO_DECAY_VARIABLE_NAMES  # noqa: E402

SIZE = dict(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072)


def bert_base_forward_flops(batch, length):
    """Multiply-adds x2 of the encoder's matmuls (embedding lookups are free)."""
    h, i, n, layers = SIZE["hidden_dim"], SIZE["intermediate_dim"], batch * length, SIZE["num_layers"]
    projections = 4 * h * h + 2 * h * i
    attention = 2 * length * h
    return 2 * n * layers * (projections + attention) + 2 * batch * h * h


def matmul_rate(size=2048, repeats=5):
    """float32 GFLOP/s of a square matmul with NumPy's BLAS on this machine."""
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    a @ a
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - start)
    return 2 * size**3 / min(times) / 1e9


def median_times(functions, repeats, settle=False):
    """`{name: median seconds}` of each function of `functions`, timed in turns.

    Each is called once first (tracing, compilation); then every round calls
    each once, so a drift in the machine's speed falls on all of them alike.
    With `settle`, each timed call directly follows an untimed call of the
    same function: the memory another system freed just before is then not
    handed back to the next one page by page (glibc returns freed heap to the
    system, and touching fresh pages costs 15–30 ms of page faults in a
    bert_base forward here, paid by whichever system runs after a train step).
    """
    for function in functions.values():
        function()
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            if settle:
                function()
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def keras_adamw(peak_rate, warmup_steps=100, total_steps=1000):
    """Keras' own AdamW set up as `create_optimizer` sets up kbert's: what a KerasHub user compiles with."""
    optimizer = keras.optimizers.AdamW(
        kbert.pretraining.WarmupLinearDecay(peak_rate, warmup_steps, total_steps),
        weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0,
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_VARIABLE_NAMES))
    return optimizer


def make_inputs(batch, length):
    rng = np.random.default_rng(0)
    return {
        "token_ids": rng.integers(0, SIZE["vocabulary_size"], (batch, length)).astype("int32"),
        "segment_ids": np.zeros((batch, length), "int32"),
        "padding_mask": np.ones((batch, length), "int32"),
    }, rng.integers(0, 2, (batch,))


def keras_candidates():
    # keras-hub imports TensorFlow: keep its start-up lines off the console.
    keras_hub = quiet_import("keras_hub")

    def kbert_model():
        return kbert.models.bert_base(), kbert.pretraining.AdamW(1e-5, weight_decay=0.0)

    def keras_hub_model():
        backbone = keras_hub.models.BertBackbone(max_sequence_length=512, num_segments=2, dropout=0.1, **SIZE)
        return backbone, keras.optimizers.Adam(1e-5)

    return {"kbert": kbert_model, "keras-hub BertBackbone": keras_hub_model}


def keras_calls(build, inputs, labels):
    """`(forward, training step)` of the `(backbone, optimizer)` `build()` returns, Dense(2) on the pooled output."""
    backbone, optimizer = build()
    model_inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in inputs}
    logits = keras.layers.Dense(2)(backbone(model_inputs)["pooled_output"])
    classifier = keras.Model(model_inputs, logits)
    classifier.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return lambda: backbone.predict_on_batch(inputs), lambda: classifier.train_on_batch(inputs, labels)


def transformers_calls(inputs, labels, fused=None):
    """`(forward, training step)` of transformers' `BertModel` (sdpa), Linear(2) on its pooled output, Adam(`fused`)."""
    import torch
    import transformers

    config = transformers.BertConfig(attn_implementation="sdpa")
    model = transformers.BertModel(config)
    ids = torch.as_tensor(inputs["token_ids"], dtype=torch.long)
    types = torch.as_tensor(inputs["segment_ids"], dtype=torch.long)
    mask = torch.as_tensor(inputs["padding_mask"], dtype=torch.long)
    head = torch.nn.Linear(config.hidden_size, 2)
    optimizer = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-5, fused=fused)
    target = torch.as_tensor(labels)

    def forward():
        with torch.no_grad():
            model.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask)

    def step():
        optimizer.zero_grad()
        pooled = model.train()(input_ids=ids, token_type_ids=types, attention_mask=mask).pooler_output
        loss = torch.nn.functional.cross_entropy(head(pooled), target)
        loss.backward()
        optimizer.step()

    return forward, step


def system_factories(inputs, labels):
    """`{name: factory}`, each factory building one system and returning its `(forward, step)`."""
    factories = {name: functools.partial(keras_calls, build, inputs, labels)
                 for name, build in keras_candidates().items()}
    if keras.backend.backend() == "torch":
        factories["transformers BertModel (sdpa)"] = functools.partial(transformers_calls, inputs, labels)
        factories["transformers, fused Adam"] = functools.partial(
            transformers_calls, inputs, labels, fused=True)
    return factories


def measure(calls, repeats):
    """`{name: (forward s, step s)}` of `calls` (`name -> (forward, step)`), timed in turns."""
    forward = median_times({name: pair[0] for name, pair in calls.items()}, repeats, settle=True)
    step = median_times({name: pair[1] for name, pair in calls.items()}, repeats, settle=True)
    return {name: (forward[name], step[name]) for name in calls}


def measure_isolated(names, args):
    """`measure` of each system in a process of its own (`--only`), one after another."""
    results = {}
    for name in names:
        command = [sys.executable, os.path.abspath(__file__), "--only", name, "--batch", str(args.batch),
                   "--length", str(args.length), "--repeats", str(args.repeats)]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        results[name] = tuple(json.loads(output.strip().splitlines()[-1]))
    return results


def print_table(results, args):
    gflop = bert_base_forward_flops(args.batch, args.length) / 1e9
    rate = matmul_rate()
    floor = gflop / rate
    ours_forward, ours_step = results["kbert"]
    where = "each system in its own process" if args.isolated else "all systems in one process"
    print(f"\nbert_base, batch {args.batch} x {args.length} tokens, float32, backend "
          f"{keras.backend.backend()}, {where}")
    print(f"forward ≈ {gflop:.0f} GFLOP; float32 matmul {rate:.0f} GFLOP/s ⇒ forward floor {floor:.2f} s\n")
    print(f"| {'model':<30} | forward (s) | vs kbert | train step (s) | vs kbert |")
    print(f"|{'-' * 32}|-------------|----------|---------------|----------|")
    for name, (forward, step) in results.items():
        print(
            f"| {name:<30} | {forward:11.3f} | {forward / ours_forward:7.2f}x "
            f"| {step:13.3f} | {step / ours_step:7.2f}x |"
        )
    print(f"\nkbert forward = {ours_forward / floor:.2f}x the matmul floor "
          f"({gflop / ours_forward:.0f} GFLOP/s achieved)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--isolated", action="store_true",
                        help="time each system in a process of its own (no shared memory allocator)")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    inputs, labels = make_inputs(args.batch, args.length)
    factories = system_factories(inputs, labels)
    if args.only:
        print(json.dumps(measure({args.only: factories[args.only]()}, args.repeats)[args.only]))
        return
    if args.isolated:
        results = measure_isolated(list(factories), args)
    else:
        results = measure({name: factory() for name, factory in factories.items()}, args.repeats)
    print_table(results, args)


if __name__ == "__main__":
    main()
