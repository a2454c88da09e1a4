"""Greedy decoding speed of t5_small: kbert with and without the key/value cache on
every backend, and transformers' `generate` on torch, in one run.

    python benchmarks/generation.py [--batch 8] [--source 128] [--new 64] [--repeats 3] [--budget 1500]

Each backend runs in its own process (the Keras backend is fixed at import).
A random t5_small decodes `--new` tokens for `--batch` encoder inputs of
`--source` tokens; the end id is disabled on both sides (kbert `end_id=-1`,
transformers `min_new_tokens`), so every run makes exactly the same number of
tokens. On torch kbert runs both eagerly and with its decoder step compiled
by `torch.compile` (`jit_compile=True`); kbert decodes through
`kbert.tasks.Seq2SeqLM.generate`, which keeps one compiled generator per set
of options. After a warm-up call per system
that pays compilation, the systems of a backend are timed in turns and the
median of `--repeats` calls is reported as generated tokens per second
(batch × new tokens / seconds). The table is printed and written to
benchmarks/results/generation.md, rewritten after each backend so that a
partial run keeps its numbers; a backend still running when `--budget`
seconds have passed is stopped and listed as not measured.
"""

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

BACKENDS = ("tensorflow", "jax", "torch")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "generation.md")


def measure(args):
    """Rows `(system, tokens/s)` for the current backend."""
    import numpy as np

    import kbert
    import keras
    from encoder_throughput import median_times
    from kbert.tasks import Seq2SeqLM

    keras.utils.set_random_seed(0)
    model = Seq2SeqLM(kbert.models.t5_small(dropout=0.0))
    rng = np.random.default_rng(0)
    ids = rng.integers(2, 32000, (args.batch, args.source)).astype("int32")
    inputs = {"encoder_token_ids": ids, "encoder_padding_mask": np.ones_like(ids)}
    tokens = args.batch * args.new
    backend = keras.backend.backend()
    label = {"tensorflow": "TF + XLA", "jax": "JAX (jit)", "torch": "torch (eager)"}[backend]
    systems = []
    def generate(**options):
        return model.generate(inputs, max_new_tokens=args.new, end_id=-1, **options)

    for use_cache in (True, False):
        name = f"kbert {label}, {'cache' if use_cache else 'no cache'}"
        systems.append((name, lambda use_cache=use_cache: generate(use_cache=use_cache)))
    if backend == "torch":
        import torch
        import transformers

        systems.insert(1, ("kbert torch (torch.compile), cache", lambda: generate(jit_compile=True)))
        config = transformers.T5Config.from_dict(
            dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                 dropout_rate=0.0, decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)
        )
        hf_model = transformers.T5ForConditionalGeneration(config).eval()
        hf_ids = torch.tensor(ids, dtype=torch.long)

        def hf_generate(use_cache):
            with torch.no_grad():
                hf_model.generate(
                    input_ids=hf_ids,
                    attention_mask=torch.ones_like(hf_ids),
                    max_new_tokens=args.new,
                    min_new_tokens=args.new,
                    do_sample=False,
                    num_beams=1,
                    use_cache=use_cache,
                )

        for use_cache in (True, False):
            name = f"transformers generate, {'cache' if use_cache else 'no cache'}"
            systems.append((name, lambda use_cache=use_cache: hf_generate(use_cache)))
    seconds = median_times(dict(systems), args.repeats)
    return [(name, tokens / seconds[name]) for name, _ in systems]


def table(args, rows, missing):
    """The results as markdown: one row per system, then the two targets checked."""
    speed = dict(rows)
    lines = [
        f"# Greedy generation, t5_small (random), batch {args.batch}, encoder input "
        f"{args.source}, {args.new} new tokens, float32, CPU",
        "",
        f"Every row generates all {args.new} tokens (end id disabled); median of "
        f"{args.repeats} timed call(s) after a warm-up call.",
        "",
        "| system | tokens/s | cache speed-up |",
        "|---|---|---|",
    ]
    for name, value in rows:
        speed_up = ""
        if name.endswith(", cache") and name.replace(", cache", ", no cache") in speed:
            speed_up = f"{value / speed[name.replace(', cache', ', no cache')]:.1f}×"
        lines.append(f"| {name} | {value:.0f} | {speed_up} |")
    lines.append("")
    for name, value in rows:
        if name.startswith("kbert") and name.endswith(", cache"):
            no_cache = speed.get(name.replace(", cache", ", no cache"))
            if no_cache:
                verdict = "met" if value >= 3 * no_cache else "MISSED"
                lines.append(f"- Target cache ≥ 3× recompute, {name[:-7]}: {verdict} ({value / no_cache:.1f}×).")
    hf_torch = speed.get("transformers generate, cache")
    for mode in ("eager", "torch.compile"):
        kbert_torch = speed.get(f"kbert torch ({mode}), cache")
        if kbert_torch and hf_torch:
            verdict = "met" if kbert_torch >= hf_torch else "MISSED"
            lines.append(
                f"- Target kbert on torch ({mode}) no slower than transformers (both with "
                f"cache): {verdict} ({kbert_torch:.0f} vs {hf_torch:.0f} tokens/s)."
            )
    for backend, reason in missing:
        lines.append(f"- {backend}: not measured ({reason}).")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--source", type=int, default=128)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=1500, help="seconds for the whole run")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args)))
        return
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    deadline = time.monotonic() + args.budget
    rows, missing = [], []
    for index, backend in enumerate(BACKENDS):
        command = [sys.executable, __file__, "--worker", "--batch", str(args.batch),
                   "--source", str(args.source), "--new", str(args.new), "--repeats", str(args.repeats)]
        try:
            result = subprocess.run(command, env=dict(os.environ, KERAS_BACKEND=backend),
                                    capture_output=True, text=True, check=True,
                                    timeout=max(1.0, deadline - time.monotonic()))
            rows += [tuple(row) for row in json.loads(result.stdout.strip().splitlines()[-1])]
            print(f"{backend}: done", file=sys.stderr)
        except subprocess.TimeoutExpired:
            missing.append((backend, f"the {args.budget:.0f} s budget ran out"))
        except subprocess.CalledProcessError as error:
            missing.append((backend, "worker failed: " + error.stderr.strip().splitlines()[-1]))
        # Written after every backend, so that a partial run still leaves its numbers.
        pending = [(b, "not reached yet") for b in BACKENDS[index + 1:]]
        with open(RESULTS, "w") as f:
            f.write(table(args, rows, missing + pending))
    print(table(args, rows, missing))


if __name__ == "__main__":
    main()
