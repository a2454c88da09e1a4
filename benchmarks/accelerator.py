"""The GPU check: kbert against transformers on one accelerator, bf16, random weights.

    python benchmarks/accelerator.py [--small] [--backends torch jax] [--budget 360]
        [--no-compile] [--results FILE]

Reproduces issue 27's table for the backends installed (each backend in a
process of its own, as the Keras backend is fixed at import):

- bert_base MLM+NSP training step, 256 × 128, `mixed_bfloat16`: kbert's
  `BertPretrainer` (eager, and `jit_compile=True` on PyTorch) against
  transformers' `BertForPreTraining` under bf16 autocast (eager, and
  `torch.compile`);
- GPT-2 124M greedy decoding, prompt 64 + 64 new tokens, batch 8 and 64
  (tokens/s): kbert's `CausalLM.generate` against transformers' `generate`;
- a base-size encoder forward, batch 1, 4,096 and 16,384 tokens: dense
  attention (transformers' `BertModel`, sdpa), BigBird (`BigBirdModel`,
  block-sparse, blocks of 64, 3 random) and Longformer (`LongformerModel`,
  window 512).

Model FLOPs count the same work for every system: the encoder's matmuls and
attention scores (dense, for the forwards), the MLM head on the 20 masked
positions, ×3 for training. MFU divides the model-FLOP rate by the rate of a
bf16 matmul the script times itself on the same device. Each time is the
median of 5 calls after 2 warm-ups (which pay the compilation); a call ends
with a value read to the host, so it has finished on the device. Results go
to `--results` (benchmarks/results/accelerator.md), rewritten after each
backend; a backend still running after its share of `--budget` seconds is
stopped and its systems listed as not measured.

`--small` runs tiny sizes (width 64, 2 layers, short sequences) so that the
whole script runs on a CPU in about a minute, without `torch.compile`; its
numbers check the script, not a device.

On a lent GPU machine (torch, jax and transformers, no keras, no internet):
carry the keras wheels (`keras==3.15.1`, `namex`, `optree`, downloaded here
for cp312 manylinux) and this checkout, install the wheels with `pip install
--no-deps --target /tmp/site`, set `PYTHONPATH=/tmp/site:$PWD`, and run
`python benchmarks/accelerator.py` (docs/architecture.md §10 has the command).
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "accelerator.md")
MASKED = 20  # MLM predictions per row
FULL = dict(hidden=768, layers=12, heads=12, intermediate=3072, vocabulary=30522,
            train=(256, 128), gpt2=dict(vocabulary=50257, prompt=64, new=64, batches=(8, 64)),
            lengths=(4096, 16384), block=64, random_blocks=3, window=512, matmul=8192)
SMALL = dict(hidden=64, layers=2, heads=2, intermediate=256, vocabulary=1000,
             train=(8, 32), gpt2=dict(vocabulary=1000, prompt=8, new=8, batches=(2, 4)),
             lengths=(256, 512), block=16, random_blocks=1, window=32, matmul=512)


# --- Model FLOPs and the table -------------------------------------------------------


def encoder_flops(sizes, batch, length):
    """2 × multiply-adds of an encoder forward: projections, feed-forward, dense attention scores."""
    h, i = sizes["hidden"], sizes["intermediate"]
    per_token = sizes["layers"] * (4 * h * h + 2 * h * i + 2 * length * h)
    return 2 * batch * length * per_token


def training_flops(sizes, batch, length):
    """×3 (forward and backward) of the encoder and the MLM head on `MASKED` positions a row."""
    head = 2 * batch * MASKED * (sizes["hidden"] ** 2 + sizes["hidden"] * sizes["vocabulary"])
    return 3 * (encoder_flops(sizes, batch, length) + head)


def build_table(rows, matmul_flops):
    """The Markdown table of measured `rows` with model-FLOP rates, MFU and ratios to transformers.

    Each row is a dict: `workload`, `system`, and either `seconds` (with
    `flops`, model FLOPs per call, or `tokens`, generated per call) or
    `error`. The ratio is the row's speed over that of the workload's
    transformers eager row (above 1: faster than transformers).

    >>> rows = [{"workload": "w", "system": "transformers eager", "seconds": 2.0, "flops": 4e12},
    ...         {"workload": "w", "system": "kbert torch eager", "seconds": 1.0, "flops": 4e12}]
    >>> print(build_table(rows, 8e12).splitlines()[-1])
    | w | kbert torch eager | 1000 ms | 4 TFLOP/s | 50% | 2.00 |
    """
    reference = {row["workload"]: row for row in rows
                 if row["system"] == "transformers eager" and "seconds" in row}
    lines = ["| workload | system | time | model rate | MFU | vs transformers eager |",
             "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        if "seconds" not in row:
            lines.append(f"| {row['workload']} | {row['system']} | {row['error']} | | | |")
            continue
        seconds, base = row["seconds"], reference.get(row["workload"])
        ratio = f"{base['seconds'] / seconds:.2f}" if base else ""
        if row.get("tokens"):
            lines.append(f"| {row['workload']} | {row['system']} | {row['tokens'] / seconds:,.0f} tokens/s "
                         f"| | | {ratio} |")
            continue
        rate = row["flops"] / seconds
        lines.append(f"| {row['workload']} | {row['system']} | {seconds * 1e3:.0f} ms | "
                     f"{rate / 1e12:.3g} TFLOP/s | {100 * rate / matmul_flops:.0f}% | {ratio} |")
    return "\n".join(lines)


# --- Timing --------------------------------------------------------------------------


def median_seconds(call, repeats=5, warmups=2):
    """Median wall time of `call()` after `warmups` calls (compilation, caches)."""
    for _ in range(warmups):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_rate(size):
    """FLOP/s of a bf16 `size`³ matmul on the default device of the backend this process runs."""
    import keras

    a = keras.ops.ones((size, size), "bfloat16")

    def product():
        keras.ops.convert_to_numpy(keras.ops.matmul(a, a)[0, 0])

    return 2 * size**3 / median_seconds(product)


def measured(rows, workload, system, call, **work):
    """Time `call` and append its row to `rows`; a failure is recorded as the row's error."""
    try:
        rows.append({"workload": workload, "system": system, "seconds": median_seconds(call), **work})
    except Exception as error:  # a system that fails is a result, not the end of the run
        message = str(error).splitlines()[0][:120] if str(error) else ""
        rows.append({"workload": workload, "system": system,
                     "error": f"fails ({type(error).__name__}: {message})"})
    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)


# --- kbert ---------------------------------------------------------------------------


def kbert_encoder(sizes, attention="dense", max_positions=512, **attention_kwargs):
    import kbert

    return kbert.models.Encoder(
        vocabulary_size=sizes["vocabulary"], num_layers=sizes["layers"], num_heads=sizes["heads"],
        hidden_dim=sizes["hidden"], intermediate_dim=sizes["intermediate"], max_positions=max_positions,
        attention=attention, attention_kwargs=attention_kwargs or None, dtype="mixed_bfloat16")


def pretraining_batch(sizes):
    import numpy as np

    batch, length = sizes["train"]
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(5, sizes["vocabulary"], (batch, length)).astype("int32"),
         "segment_ids": np.zeros((batch, length), "int32"),
         "padding_mask": np.ones((batch, length), "int32"),
         "mask_positions": np.sort(rng.choice(np.arange(1, length), (batch, MASKED)), axis=1).astype("int32")}
    y = {"mask_ids": rng.integers(5, sizes["vocabulary"], (batch, MASKED)).astype("int32"),
         "mask_weights": np.ones((batch, MASKED), "float32"),
         "pair_labels": rng.integers(0, 2, (batch,)).astype("int32")}
    return x, y


def kbert_rows(sizes, label, compile_too):
    """kbert's rows on the backend this process runs (`label` names it)."""
    import keras

    import kbert
    from kbert.pretraining import BertPretrainer, create_optimizer
    from kbert.tasks import CausalLM

    rows, torch_backend = [], keras.backend.backend() == "torch"
    x, y = pretraining_batch(sizes)
    train = "bert_base MLM+NSP train step" + (" (small)" if sizes is SMALL else "")
    for jit in [False, True] if torch_backend and compile_too else ["auto"]:
        model = BertPretrainer(kbert_encoder(sizes), pair_objective="nsp")
        model.compile(optimizer=create_optimizer("adamw", 1e-4, total_steps=1000, warmup_steps=10),
                      jit_compile=jit)
        name = system_name(label, jit)
        measured(rows, train, name, lambda model=model: model.train_on_batch(x, y),
                 flops=training_flops(sizes, *sizes["train"]))
    gpt2 = sizes["gpt2"]
    lm = CausalLM(kbert.models.GPT2(vocabulary_size=gpt2["vocabulary"], num_layers=sizes["layers"],
                                    num_heads=sizes["heads"], hidden_dim=sizes["hidden"],
                                    intermediate_dim=sizes["intermediate"], dropout=0.0, end_id=0,
                                    max_positions=1024, dtype="bfloat16"))
    for batch in gpt2["batches"]:
        prompts = gpt2_prompts(gpt2, batch)
        for jit in [False, True] if torch_backend and compile_too else ["auto"]:
            name = system_name(label, jit)
            measured(rows, f"GPT-2 greedy, batch {batch}", name,
                     lambda prompts=prompts, jit=jit: lm.generate(
                         prompts, max_new_tokens=gpt2["new"], end_id=-1, jit_compile=jit),
                     tokens=batch * gpt2["new"])
    for length in sizes["lengths"]:
        for attention, kwargs in long_attentions(sizes):
            encoder = kbert_encoder(sizes, attention, max_positions=length, **kwargs)
            inputs = encoder_inputs(sizes, length)
            forward = jitted_forward(encoder, inputs)
            measured(rows, f"{attention} forward, 1 × {length}", f"kbert {label}", forward,
                     flops=encoder_flops(sizes, 1, length))
    return rows


def system_name(label, jit):
    return "kbert torch jit_compile=True" if jit is True else f"kbert {label}"


def long_attentions(sizes):
    return [("dense", {}), ("bigbird", {"block_size": sizes["block"], "num_random_blocks": sizes["random_blocks"]}),
            ("longformer", {"window": sizes["window"] // 2})]


def encoder_inputs(sizes, length):
    import numpy as np

    rng = np.random.default_rng(0)
    return {"token_ids": rng.integers(5, sizes["vocabulary"], (1, length)).astype("int32"),
            "segment_ids": np.zeros((1, length), "int32"), "padding_mask": np.ones((1, length), "int32")}


def jitted_forward(encoder, inputs):
    """A forward of `encoder` as its backend runs it fastest: `jax.jit` / `tf.function(jit_compile)`,
    eager on PyTorch; ends with one value read to the host."""
    import keras

    backend = keras.backend.backend()
    tensors = {name: keras.ops.convert_to_tensor(value) for name, value in inputs.items()}
    if backend == "jax":
        import jax

        trainable = [v.value for v in encoder.trainable_variables]
        frozen = [v.value for v in encoder.non_trainable_variables]

        @jax.jit
        def forward(trainable, frozen, data):
            return encoder.stateless_call(trainable, frozen, data)[0]["sequence_output"]

        return lambda: float(forward(trainable, frozen, tensors)[0, 0, 0])
    if backend == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(lambda data: encoder(data)["sequence_output"], jit_compile=True)
        return lambda: float(compiled(tensors)[0, 0, 0])
    import torch

    def forward():
        with torch.no_grad():
            return float(encoder(tensors)["sequence_output"][0, 0, 0])

    return forward


def gpt2_prompts(gpt2, batch):
    import numpy as np

    ids = np.random.default_rng(0).integers(5, gpt2["vocabulary"], (batch, gpt2["prompt"])).astype("int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids)}


# --- transformers --------------------------------------------------------------------


def transformers_rows(sizes, compile_too):
    """transformers' rows (PyTorch), on the GPU when there is one."""
    import torch

    rows = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train = "bert_base MLM+NSP train step" + (" (small)" if sizes is SMALL else "")
    for compiled in [False, True] if compile_too else [False]:
        step = transformers_training_step(sizes, device, compiled)
        measured(rows, train, "transformers + torch.compile" if compiled else "transformers eager", step,
                 flops=training_flops(sizes, *sizes["train"]))
    for batch in sizes["gpt2"]["batches"]:
        measured(rows, f"GPT-2 greedy, batch {batch}", "transformers eager",
                 transformers_generate(sizes, device, batch), tokens=batch * sizes["gpt2"]["new"])
    for length in sizes["lengths"]:
        for attention, _ in long_attentions(sizes):
            forward = transformers_forward(sizes, device, attention, length)
            measured(rows, f"{attention} forward, 1 × {length}", "transformers eager", forward,
                     flops=encoder_flops(sizes, 1, length))
    return rows


def bert_config(sizes, **overrides):
    return dict(vocab_size=sizes["vocabulary"], hidden_size=sizes["hidden"], num_hidden_layers=sizes["layers"],
                num_attention_heads=sizes["heads"], intermediate_size=sizes["intermediate"], **overrides)


def transformers_training_step(sizes, device, compiled):
    import torch
    import transformers

    model = transformers.BertForPreTraining(transformers.BertConfig(**bert_config(sizes))).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    x, y = pretraining_batch(sizes)
    ids = torch.as_tensor(x["token_ids"], dtype=torch.long, device=device)
    labels = torch.full_like(ids, -100)
    labels.scatter_(1, torch.as_tensor(x["mask_positions"], dtype=torch.long, device=device),
                    torch.as_tensor(y["mask_ids"], dtype=torch.long, device=device))
    pair = torch.as_tensor(y["pair_labels"], dtype=torch.long, device=device)
    forward = torch.compile(model) if compiled else model

    def step():
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = forward(input_ids=ids, labels=labels, next_sentence_label=pair).loss
        loss.backward()
        optimizer.step()
        return float(loss)

    return step


def transformers_generate(sizes, device, batch):
    import torch
    import transformers

    gpt2 = sizes["gpt2"]
    config = transformers.GPT2Config(vocab_size=gpt2["vocabulary"], n_layer=sizes["layers"], n_head=sizes["heads"],
                                     n_embd=sizes["hidden"], bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = transformers.GPT2LMHeadModel(config).to(device, torch.bfloat16).eval()
    prompts = gpt2_prompts(gpt2, batch)
    ids = torch.as_tensor(prompts["token_ids"], dtype=torch.long, device=device)

    def generate():
        with torch.no_grad():
            output = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                    max_new_tokens=gpt2["new"], min_new_tokens=gpt2["new"], do_sample=False)
        return int(output[0, -1])

    return generate


def transformers_forward(sizes, device, attention, length):
    import torch
    import transformers

    if attention == "dense":
        config = transformers.BertConfig(**bert_config(sizes, max_position_embeddings=length),
                                         attn_implementation="sdpa")
        model = transformers.BertModel(config)
    elif attention == "bigbird":
        config = transformers.BigBirdConfig(**bert_config(sizes, max_position_embeddings=length),
                                            attention_type="block_sparse", block_size=sizes["block"],
                                            num_random_blocks=sizes["random_blocks"])
        model = transformers.BigBirdModel(config)
    else:
        config = transformers.LongformerConfig(**bert_config(sizes, max_position_embeddings=length + 2),
                                               attention_window=sizes["window"])
        model = transformers.LongformerModel(config)
    model = model.to(device, torch.bfloat16).eval()
    ids = torch.as_tensor(encoder_inputs(sizes, length)["token_ids"], dtype=torch.long, device=device)

    def forward():
        with torch.no_grad():
            return float(model(input_ids=ids).last_hidden_state[0, 0, 0])

    return forward


# --- Processes -----------------------------------------------------------------------


def worker(backend, small, compile_too):
    """Print the JSON rows of one backend (this process imports Keras with it)."""
    os.environ["KERAS_BACKEND"] = backend
    import keras

    sizes = SMALL if small else FULL
    keras.utils.set_random_seed(0)
    label = {"torch": "torch eager", "jax": "JAX (jit)", "tensorflow": "TF (XLA)"}[backend]
    rows = kbert_rows(sizes, label, compile_too)
    rate = matmul_rate(sizes["matmul"])
    if backend == "torch":
        with contextlib.suppress(ImportError):
            rows += transformers_rows(sizes, compile_too)
    print(json.dumps({"rows": rows, "matmul_flops": rate, "device": device_name(backend)}))


def device_name(backend):
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    if backend == "jax":
        import jax

        return jax.devices()[0].device_kind
    return "TensorFlow default device"


def run_backend(backend, args, seconds):
    """The worker's result for `backend`, or None when it failed or ran out of its `seconds`."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", backend]
    command += ["--small"] * args.small + ["--no-compile"] * args.no_compile
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny sizes: a CPU check of the script")
    parser.add_argument("--backends", nargs="+", default=["torch", "jax"])
    parser.add_argument("--budget", type=float, default=360.0, help="seconds for all backends")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile systems")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.small, not (args.small or args.no_compile))
    rows, rates, devices, missing = [], {}, {}, []
    for backend in args.backends:
        result = run_backend(backend, args, args.budget / len(args.backends))
        if result is None:
            missing.append(backend)
            continue
        rows += result["rows"]
        rates[backend], devices[backend] = result["matmul_flops"], result["device"]
        write(args, rows, rates, devices, missing)
    write(args, rows, rates, devices, missing)


def write(args, rows, rates, devices, missing):
    """Print the table and write it to `--results`."""
    rate = max(rates.values()) if rates else float("nan")
    text = "\n".join([
        f"# kbert against transformers on an accelerator{' (--small: a CPU check of the script)' * args.small}",
        "",
        f"`python benchmarks/accelerator.py{' --small' * args.small}`; devices: "
        + ", ".join(f"{b}: {d}" for b, d in devices.items())
        + f". bf16 matmul {FULL['matmul'] if not args.small else SMALL['matmul']}³: {rate / 1e12:.3g} TFLOP/s "
        "(the MFU denominator).",
        "",
        build_table(rows, rate),
        "",
        f"Not measured (failed or out of time): {', '.join(missing)}." if missing else "",
    ])
    print(text)
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w") as file:
        file.write(text.rstrip() + "\n")


if __name__ == "__main__":
    main()
