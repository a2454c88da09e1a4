"""Greedy decoding speed of t5_small and GPT-2 124M: kbert on every backend (t5_small
with and without the key/value cache), KerasHub's GPT2CausalLM on every backend,
and transformers' `generate` on torch, in one run.

    python benchmarks/generation.py [--models t5_small gpt2_base] [--batch 8] [--source 128]
        [--prompt 64] [--new 64] [--repeats 3] [--budget 1500] [--layers N] [--results FILE]
        [--backends tensorflow jax torch]

GPT-2 (random, 124M, or `--layers` deep for a smoke run) continues `--batch`
prompts of `--prompt` tokens by `--new` tokens: kbert through
`kbert.tasks.CausalLM.generate` (and with `jit_compile=True` on torch),
KerasHub's `GPT2CausalLM` built from a random `GPT2Backbone` of the same size
(no preset download; greedy sampler, no stop token), transformers'
`GPT2LMHeadModel.generate` on torch (`min_new_tokens`).

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
`--results` (benchmarks/results/generation.md), rewritten after each backend so that a
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


def median_speeds(systems, tokens, repeats):
    """Rows `(system, tokens/s)` of `systems` (`name -> call`), timed in turns."""
    from encoder_throughput import median_times

    seconds = median_times(dict(systems), repeats)
    return [(name, tokens / seconds[name]) for name, _ in systems]


def backend_label():
    import keras

    return {"tensorflow": "TF + XLA", "jax": "JAX (jit)", "torch": "torch (eager)"}[
        keras.backend.backend()
    ]


def measure_t5(args):
    """Rows `(system, tokens/s)` of t5_small for the current backend."""
    import numpy as np

    import kbert
    import keras
    from kbert.tasks import Seq2SeqLM

    keras.utils.set_random_seed(0)
    model = Seq2SeqLM(kbert.models.t5_small(dropout=0.0, **layers(args)))
    rng = np.random.default_rng(0)
    ids = rng.integers(2, 32000, (args.batch, args.source)).astype("int32")
    inputs = {"encoder_token_ids": ids, "encoder_padding_mask": np.ones_like(ids)}
    backend = keras.backend.backend()
    systems = []

    def generate(**options):
        return model.generate(inputs, max_new_tokens=args.new, end_id=-1, **options)

    for use_cache in (True, False):
        name = f"kbert {backend_label()}, {'cache' if use_cache else 'no cache'}"
        systems.append((name, lambda use_cache=use_cache: generate(use_cache=use_cache)))
    if backend == "torch":
        import torch
        import transformers

        systems.insert(1, ("kbert torch (torch.compile), cache", lambda: generate(jit_compile=True)))
        config = transformers.T5Config.from_dict(
            dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=args.layers or 6,
                 num_heads=8, dropout_rate=0.0, decoder_start_token_id=0, eos_token_id=1,
                 pad_token_id=0)
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
    return median_speeds(systems, args.batch * args.new, args.repeats)


def layers(args):
    """The `num_layers` override of a reduced-depth (smoke) run, or none."""
    return {} if args.layers is None else {"num_layers": args.layers}


def gpt2_prompts(args):
    """`(ids, mask)` of `--batch` random prompts of `--prompt` tokens (no padding)."""
    import numpy as np

    ids = np.random.default_rng(0).integers(0, 50256, (args.batch, args.prompt)).astype("int32")
    return ids, np.ones_like(ids)


def measure_gpt2(args):
    """Rows `(system, tokens/s)` of a random GPT-2 124M for the current backend: kbert's
    `CausalLM.generate`, KerasHub's `GPT2CausalLM` and, on torch, transformers."""
    import kbert
    import keras
    from kbert.tasks import CausalLM

    keras.utils.set_random_seed(0)
    model = CausalLM(kbert.models.gpt2_base(dropout=0.0, **layers(args)))
    ids, mask = gpt2_prompts(args)
    inputs = {"token_ids": ids, "padding_mask": mask}

    def generate(**options):
        return model.generate(inputs, max_new_tokens=args.new, end_id=-1, **options)

    systems = [(f"kbert {backend_label()}, cache", generate)]
    if keras.backend.backend() == "torch":
        systems.append(("kbert torch (torch.compile), cache", lambda: generate(jit_compile=True)))
        systems.append(("transformers generate, cache", transformers_gpt2(args, ids, mask)))
    systems.append((f"KerasHub GPT2CausalLM {backend_label()}", keras_hub_gpt2(args, ids, mask)))
    return median_speeds(systems, args.batch * args.new, args.repeats)


def keras_hub_gpt2(args, ids, mask):
    """A call generating `--new` tokens with KerasHub's `GPT2CausalLM` of a random `GPT2Backbone`
    of GPT-2 124M's size (no preset download); its prompt buffer holds the new tokens too."""
    import keras_hub
    import numpy as np

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=50257, num_layers=args.layers or 12, num_heads=12, hidden_dim=768,
        intermediate_dim=3072, dropout=0.0, max_sequence_length=1024,
    )
    causal_lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    causal_lm.compile(sampler="greedy")
    padding = np.zeros((args.batch, args.new), "int32")
    buffer = {"token_ids": np.concatenate([ids, padding], 1),
              "padding_mask": np.concatenate([mask, padding], 1).astype(bool)}
    length = args.prompt + args.new
    return lambda: causal_lm.generate(buffer, max_length=length, stop_token_ids=None)


def transformers_gpt2(args, ids, mask):
    """A call generating exactly `--new` tokens with transformers' GPT2LMHeadModel (random)."""
    import torch
    import transformers

    config = transformers.GPT2Config(n_layer=args.layers or 12, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    hf_ids, hf_mask = torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)

    def hf_generate():
        with torch.no_grad():
            hf_model.generate(input_ids=hf_ids, attention_mask=hf_mask, max_new_tokens=args.new,
                              min_new_tokens=args.new, do_sample=False, num_beams=1,
                              pad_token_id=config.eos_token_id)

    return hf_generate


MEASURES = {"t5_small": measure_t5, "gpt2_base": measure_gpt2}


def t5_table(args, rows):
    """The t5_small section: one row per system, then the targets checked."""
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
    return lines + transformers_targets(speed)


def transformers_targets(speed):
    """The target lines of kbert on torch (eager, torch.compile) against transformers."""
    lines = []
    hf_torch = speed.get("transformers generate, cache")
    for mode in ("eager", "torch.compile"):
        kbert_torch = speed.get(f"kbert torch ({mode}), cache")
        if kbert_torch and hf_torch:
            verdict = "met" if kbert_torch >= hf_torch else "MISSED"
            lines.append(
                f"- Target kbert on torch ({mode}) no slower than transformers (both with "
                f"cache): {verdict} ({kbert_torch:.0f} vs {hf_torch:.0f} tokens/s)."
            )
    return lines


def gpt2_table(args, rows):
    """The GPT-2 section: one row per system, then kbert against KerasHub and transformers."""
    speed = dict(rows)
    lines = [
        f"# Greedy generation, GPT-2 124M (random), batch {args.batch}, prompt {args.prompt}, "
        f"{args.new} new tokens, float32, CPU",
        "",
        "| system | tokens/s |",
        "|---|---|",
        *[f"| {name} | {value:.0f} |" for name, value in rows],
        "",
    ]
    for label in ("TF + XLA", "JAX (jit)", "torch (eager)"):
        ours, theirs = speed.get(f"kbert {label}, cache"), speed.get(f"KerasHub GPT2CausalLM {label}")
        if ours and theirs:
            verdict = "met" if ours >= theirs else "MISSED"
            lines.append(f"- Target kbert ≥ KerasHub on {label}: {verdict} ({ours:.0f} vs {theirs:.0f} tokens/s).")
    return lines + transformers_targets(speed)


def table(args, rows, missing):
    """The results as markdown: a section per model, then what was not measured."""
    sections = {"t5_small": t5_table, "gpt2_base": gpt2_table}
    lines = []
    for model in args.models:
        model_rows = [(name, value) for row_model, name, value in rows if row_model == model]
        lines += sections[model](args, model_rows) + [""]
    for backend, reason in missing:
        lines.append(f"- {backend}: not measured ({reason}).")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--source", type=int, default=128, help="t5_small encoder input length")
    parser.add_argument("--prompt", type=int, default=64, help="GPT-2 prompt length")
    parser.add_argument("--models", nargs="+", choices=sorted(MEASURES), default=list(MEASURES))
    parser.add_argument("--layers", type=int, help="fewer layers, for a smoke run (default: full size)")
    parser.add_argument("--results", default=RESULTS, help="the markdown file written")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=1500, help="seconds for the whole run")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        rows = [(model, *row) for model in args.models for row in MEASURES[model](args)]
        print(json.dumps(rows))
        return
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    deadline = time.monotonic() + args.budget
    rows, missing = [], []
    for index, backend in enumerate(args.backends):
        command = [sys.executable, __file__, "--worker", "--batch", str(args.batch),
                   "--source", str(args.source), "--prompt", str(args.prompt), "--new", str(args.new),
                   "--repeats", str(args.repeats), "--models", *args.models]
        if args.layers is not None:
            command += ["--layers", str(args.layers)]
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
        pending = [(b, "not reached yet") for b in args.backends[index + 1:]]
        with open(args.results, "w") as f:
            f.write(table(args, rows, missing + pending))
    print(table(args, rows, missing))


if __name__ == "__main__":
    main()
