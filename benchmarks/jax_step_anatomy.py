"""The anatomy of kbert's JAX training step: what XLA compiles, counted, against keras-hub's.

    KERAS_BACKEND=jax python benchmarks/jax_step_anatomy.py [--results FILE]

On an H200, kbert's bf16 bert_base MLM+NSP step runs at 27% MFU on JAX. A
GPU is not needed to see what the step is made of: this builds kbert's
`BertPretrainer` (MLM+NSP) and keras-hub's `BertMaskedLM` (the peer: MLM
only, the same backbone config) on a small BERT under `mixed_bfloat16`,
lowers and compiles each one's Keras training step (`model.train_step`,
as Keras' JAX trainer jits it) on the CPU, and counts:

- from the jaxpr (the program, the same on every platform): random-bit
  draws (`random_bits`, `threefry2x32`, `rng_bit_generator`) and the
  32-bit words they make per step, `dot`s by operand and result dtype,
  `convert`s by direction, and the operations whose result has the
  `(batch, heads, length, length)` shape of attention scores, by dtype;
- from the optimized HLO (every computation, fused ones included):
  instructions, by where they come from (forward, backward, optimizer,
  random bits: their `op_name`), fusions, `while` loops, `exponential`s,
  custom calls (a cuDNN attention kernel would show here on a GPU), and
  XLA's cost analysis (flops, bytes accessed);
- the compiled step's temporary memory (`memory_analysis`).

Each is printed for kbert with the PRNG its dropout uses by default
(`philox4x32`), for kbert with `KBERT_JAX_DROPOUT_PRNG=threefry` (Keras'
`Dropout`, what kbert drew before) and `=rbg`, and for keras-hub. A third
table times one dropout with each PRNG here, and checks that each draws over
a batch sharded on 4 CPU devices the mask it draws on one. The
counts do not depend on the weights (random) or on timing; they depend on
the XLA version and the platform (CPU here: a GPU fuses differently and
may lower threefry to a kernel). A second table compiles a dense
encoder forward (width 64, 1 layer) at two lengths and reports the
compiled temporary memory: quadratic in the length where the scores are
materialized (XLA's attention, which is what the CPU runs).
"""

import argparse
import collections
import os
import re
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from accelerator import pretraining_batch  # noqa: E402 (the same batch as the GPU check's)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "jax_step_anatomy.md")
SIZES = {"vocabulary": 1000, "layers": 2, "heads": 2, "hidden": 128, "intermediate": 512,
         "train": (8, 128), "dropout": 0.1}
FORWARD_LENGTHS = (1024, 2048)
RANDOM_PRIMITIVES = ("random_bits", "threefry2x32", "rng_bit_generator")


def kbert_model(sizes):
    """kbert's `BertPretrainer` (MLM+NSP) with AdamW, compiled, and its `(x, y, None)` batch."""
    import kbert
    from kbert.pretraining import BertPretrainer, create_optimizer

    encoder = kbert.models.Encoder(
        vocabulary_size=sizes["vocabulary"], num_layers=sizes["layers"], num_heads=sizes["heads"],
        hidden_dim=sizes["hidden"], intermediate_dim=sizes["intermediate"], max_positions=512,
        dropout=sizes["dropout"], dtype="mixed_bfloat16")
    model = BertPretrainer(encoder, pair_objective="nsp")
    model.compile(optimizer=create_optimizer("adamw", 1e-4, total_steps=1000, warmup_steps=10))
    x, y = pretraining_batch(sizes)
    return model, (x, y, None)


def keras_hub_model(sizes):
    """keras-hub's `BertMaskedLM` on the same backbone config, and its batch.

    Its optimizer is Keras' AdamW with kbert's `create_optimizer` settings
    (global clipping at 1, epsilon 1e-6, no decay of norms and biases) at a
    constant rate.
    """
    import keras
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=sizes["vocabulary"], num_layers=sizes["layers"], num_heads=sizes["heads"],
        hidden_dim=sizes["hidden"], intermediate_dim=sizes["intermediate"], max_sequence_length=512,
        dropout=sizes["dropout"], dtype="mixed_bfloat16")
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()])
    x, y = pretraining_batch(sizes)
    return model, (x, y["mask_ids"], y["mask_weights"])


def compiled_step(model, data):
    """`(jaxpr, compiled)` of `model.train_step` on `data`, as Keras' JAX trainer jits it."""
    import jax
    import keras

    x, y, weight = data
    model.train_on_batch(x, y, sample_weight=weight)  # builds the model, optimizer and metrics
    state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                 optimizer_variables=True, metrics_variables=True)
    batch = keras.tree.map_structure(lambda v: None if v is None else jax.numpy.asarray(v), data)
    jaxpr = jax.make_jaxpr(model.train_step)(state, batch)
    return jaxpr, jax.jit(model.train_step).lower(state, batch).compile()


def jaxpr_counts(jaxpr, sizes):
    """Program-level counts of a jaxpr (sub-jaxprs included), the same on every platform.

    `dot`s and `convert`s by dtypes, random-bit draws and the 32-bit words
    they make, and the operations whose result has the `(batch, heads,
    length, length)` shape of attention scores, by dtype.
    """
    import math

    import jax
    import jax.extend

    counts = collections.Counter()
    batch, length = sizes["train"]
    scores = (batch, sizes["heads"], length, length)
    for equation in _equations(jaxpr.jaxpr, jax):
        name = equation.primitive.name
        inputs = [str(v.aval.dtype) for v in equation.invars if hasattr(v.aval, "dtype")]
        outputs = [v.aval for v in equation.outvars]
        if name in RANDOM_PRIMITIVES:
            counts["random draws"] += 1
            counts["random 32-bit words"] += sum(math.prod(a.shape) for a in outputs)
        elif name == "dot_general":
            counts[f"dot {'x'.join(inputs)}->{outputs[0].dtype}"] += 1
        elif name == "convert_element_type" and inputs[0] != str(outputs[0].dtype):
            counts[f"convert {inputs[0]}->{outputs[0].dtype}"] += 1
        if outputs and getattr(outputs[0], "shape", None) == scores:
            counts[f"ops on scores {outputs[0].dtype}"] += 1
    return counts


def _equations(jaxpr, jax):
    for equation in jaxpr.eqns:
        yield equation
        for sub in jax.extend.core.jaxprs_in_params(equation.params):
            yield from _equations(sub, jax)


# Where an optimized HLO instruction comes from, by its `op_name` metadata (first match;
# a second model in the process gets `adam_w_1`).
SCOPES = (("random bits", re.compile(r"bernoulli|random_bits|threefry|rng_bit")),
          ("optimizer", re.compile(r"/adam_?w(_\d+)?/")),
          ("backward", re.compile(r"transpose\(")),
          ("forward", re.compile(r"jvp\(")))


def hlo_counts(hlo_text, sizes):
    """Counts of the optimized HLO's instructions, fused computations included (see the docstring).

    An instruction outside a fused computation whose result has the scores'
    shape is a buffer written to memory (a kernel's output on a GPU):
    counted as "score buffers", by dtype.
    """
    counts = collections.Counter()
    batch, length = sizes["train"]
    scores = f"[{batch},{sizes['heads']},{length},{length}]"
    fused = False
    for line in hlo_text.splitlines():
        if line.endswith("{") and not line.startswith(" "):
            fused = line.startswith(("%fused", "%wrapped"))
        match = re.match(r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(\S+)\s+([a-z][\w-]*)\(", line)
        if not match:
            continue
        result, opcode = match.groups()
        counts["HLO instructions"] += 1
        name = re.search(r'op_name="([^"]*)"', line)
        scope = next((scope for scope, pattern in SCOPES
                      if name and pattern.search(name.group(1))), "other")
        counts[f"HLO instructions: {scope}"] += 1
        if opcode == "fusion":
            counts["HLO fusions"] += 1
        elif opcode == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', line)
            counts[f"HLO custom-call {target.group(1) if target else '?'}"] += 1
        elif opcode in ("rng-bit-generator", "exponential", "while"):
            counts[f"HLO {opcode}"] += 1
        if not fused and opcode not in PASS_THROUGH and result.split("{")[0].endswith(scores):
            counts[f"HLO score buffers {result.split('[')[0]}"] += 1
    return counts


# Instructions that write no new buffer.
PASS_THROUGH = ("parameter", "get-tuple-element", "bitcast", "tuple", "constant")


def anatomy(make, sizes, prng=None):
    """The counts of one system's training step; `prng` sets `KBERT_JAX_DROPOUT_PRNG` while it compiles."""
    import keras

    saved = os.environ.get("KBERT_JAX_DROPOUT_PRNG")
    if prng is not None:
        os.environ["KBERT_JAX_DROPOUT_PRNG"] = prng
    try:
        keras.utils.set_random_seed(0)
        model, data = make(sizes)
        jaxpr, compiled = compiled_step(model, data)
    finally:
        if saved is None:
            os.environ.pop("KBERT_JAX_DROPOUT_PRNG", None)
        else:
            os.environ["KBERT_JAX_DROPOUT_PRNG"] = saved
    counts = jaxpr_counts(jaxpr, sizes) + hlo_counts(compiled.as_text(), sizes)
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    counts["HLO bytes accessed (MiB)"] = round(cost.get("bytes accessed", 0) / 2**20, 1)
    counts["HLO GFLOP"] = round(cost.get("flops", 0) / 1e9, 3)
    counts["temporary memory (MiB)"] = round(compiled.memory_analysis().temp_size_in_bytes / 2**20, 1)
    return counts


def forward_memory(lengths):
    """`{length: compiled temporary MiB}` of a jitted 1-layer dense `Encoder` forward (width 64)."""
    import jax
    import keras
    import numpy as np

    import kbert

    memory = {}
    for length in lengths:
        keras.utils.set_random_seed(0)
        encoder = kbert.models.Encoder(vocabulary_size=100, num_layers=1, num_heads=1, hidden_dim=64,
                                       intermediate_dim=128, max_positions=length, dropout=0.0,
                                       dtype="mixed_bfloat16")
        inputs = {"token_ids": np.ones((1, length), "int32"), "segment_ids": np.zeros((1, length), "int32"),
                  "padding_mask": np.ones((1, length), "int32")}
        encoder(inputs)
        trainable = [v.value for v in encoder.trainable_variables]
        frozen = [v.value for v in encoder.non_trainable_variables]

        def forward(trainable, frozen, data, encoder=encoder):
            return encoder.stateless_call(trainable, frozen, data)[0]["sequence_output"]

        compiled = jax.jit(forward).lower(trainable, frozen, inputs).compile()
        memory[length] = compiled.memory_analysis().temp_size_in_bytes / 2**20
    return memory


def dropout_seconds(prng, shape=(16, 12, 128, 128), repeats=5):
    """Median seconds of one jitted dropout (rate 0.1) of a bf16 `shape` with `prng`'s bits, here."""
    import time

    import jax
    import numpy as np

    from kbert.backend.jax_ops import prng_dropout

    x = jax.numpy.ones(shape, "bfloat16")
    draw = jax.jit(lambda x, seed: prng_dropout(x, 0.1, seed, prng))
    seed = np.array([0, 1], "uint32")
    draw(x, seed).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        draw(x, seed).block_until_ready()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def sharded_dropout():
    """`{prng: "same mask" | "other mask" | "fails (...)"}`: one dropout over a batch sharded on 4
    CPU devices, against the same dropout on one device (in a child process: the devices are set
    before JAX starts)."""
    import json
    import subprocess

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "KERAS_BACKEND": "jax"}
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--sharded-dropout"], env=env,
                           capture_output=True, text=True, check=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


def _sharded_dropout_child():
    import json

    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from kbert.backend.jax_ops import DROPOUT_PRNGS, prng_dropout

    x = jax.numpy.ones((8, 4, 16, 16), "bfloat16")
    sharded = jax.device_put(x, NamedSharding(jax.make_mesh((4,), ("batch",)), PartitionSpec("batch")))
    seed, results = np.array([3, 5], "uint32"), {}
    for prng in DROPOUT_PRNGS:
        draw = jax.jit(lambda x, seed, prng=prng: prng_dropout(x, 0.1, seed, prng).astype("float32"))
        try:
            same = np.array_equal(np.asarray(draw(x, seed)), np.asarray(draw(sharded, seed)))
            results[prng] = "same mask" if same else "other mask"
        except Exception as error:  # a PRNG that does not compile sharded is a result
            results[prng] = f"fails ({type(error).__name__})"
    print(json.dumps(results))


def table(columns):
    """A Markdown table: one row per count, one column per system, and kbert's ratio to keras-hub."""
    names = list(columns)
    keys = sorted({key for counts in columns.values() for key in counts}, key=_row_order)
    lines = ["| count | " + " | ".join(names) + " | kbert / keras-hub |",
             "|---|" + "---:|" * (len(names) + 1)]
    for key in keys:
        values = [columns[name].get(key, 0) for name in names]
        reference = values[-1]
        ratio = f"{values[0] / reference:.2f}" if reference else ("—" if not values[0] else "∞")
        lines.append(f"| {key} | " + " | ".join(str(v) for v in values) + f" | {ratio} |")
    return "\n".join(lines)


def _row_order(key):
    first = ("HLO GFLOP", "HLO bytes accessed (MiB)", "temporary memory (MiB)", "random draws",
             "random 32-bit words")
    return (first.index(key) if key in first else len(first), key)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--sharded-dropout", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sharded_dropout:
        return _sharded_dropout_child()
    import jax
    import keras

    if keras.backend.backend() != "jax":
        sys.exit("jax_step_anatomy.py runs on JAX: KERAS_BACKEND=jax.")
    from kbert.backend.jax_ops import dropout_prng

    columns = {f"kbert ({dropout_prng()})": anatomy(kbert_model, SIZES),
               "kbert threefry (as before)": anatomy(kbert_model, SIZES, "threefry"),
               "kbert rbg": anatomy(kbert_model, SIZES, "rbg"),
               "keras-hub BertMaskedLM": anatomy(keras_hub_model, SIZES)}
    step = table(columns)
    memory = forward_memory(FORWARD_LENGTHS)
    short, long = FORWARD_LENGTHS
    growth = memory[long] / memory[short]
    forward = ("| length | compiled temporary memory (MiB) |\n|---:|---:|\n"
               + "\n".join(f"| {length} | {mib:.1f} |" for length, mib in memory.items())
               + f"\n\n×{long // short} length → ×{growth:.2f} memory "
               f"({'quadratic: scores materialized' if growth > 3 else 'linear: no scores materialized'}).")
    seconds = {prng: dropout_seconds(prng) for prng in ("threefry", "philox4x32", "rbg")}
    draws = ("| bits | ms per dropout of 16 × 12 × 128 × 128 (one bert_base layer's attention "
             "probabilities at batch 16) | threefry / this |\n|---|---:|---:|\n"
             + "\n".join(f"| {prng}{' (Keras Dropout)' if prng == 'threefry' else ''} | "
                         f"{value * 1e3:.1f} | {seconds['threefry'] / value:.2f} |"
                         for prng, value in seconds.items())
             + f"\n\nOn {jax.default_backend()}; a GPU's ratios are for `benchmarks/accelerator.py`.\n\n"
             "Over a batch sharded on 4 CPU devices, against one device: "
             + ", ".join(f"{prng}: {result}" for prng, result in sharded_dropout().items()) + ".")
    config = ", ".join(f"{k}={v}" for k, v in SIZES.items())
    text = (f"# JAX training step anatomy\n\n`KERAS_BACKEND=jax python benchmarks/jax_step_anatomy.py`\n\n"
            f"JAX {jax.__version__}, Keras {keras.__version__}, platform {jax.default_backend()}; "
            f"`mixed_bfloat16`, {config}. kbert: `BertPretrainer` MLM+NSP, kbert's AdamW; "
            f"keras-hub: `BertMaskedLM` (MLM), Keras' AdamW.\n\n{step}\n\n"
            f"## Dropout masks by PRNG\n\n{draws}\n\n"
            f"## Dense encoder forward, temporary memory\n\n{forward}\n")
    print(text)
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w") as file:
        file.write(text)


if __name__ == "__main__":
    main()
