"""PyTorch operations per decoding step and per forward: kbert against transformers on the same config.

    python benchmarks/op_counts.py [--results FILE]

On a GPU a step whose work is small (a decoding step, a batch-1 forward)
waits on the host, which pays for each operator it dispatches; this counts
them. Each aten operator dispatched is counted by a `TorchDispatchMode`
(so a Python-level call that PyTorch decomposes counts each piece it
dispatches) on eager PyTorch, CPU:

- per decoding step of greedy generation, for GPT-2 (gpt2_tiny's size: 2
  layers, width 128, batch 2, prompt 8), T5 and BART (2 layers, width 128,
  batch 2, source 8): the count of a 12-token generation minus that of a
  4-token one, over 8, so that what a generation does once cancels out;
  kbert's `CausalLMGenerator` / `Seq2SeqGenerator` against transformers'
  `generate` (`min_new_tokens`, so both make every token);
- per forward of a 2-layer encoder of bert_base's width (768, 12 heads,
  3072), batch 2 × 128 tokens with a padding mask of ones: kbert's
  `Encoder` against transformers' `BertModel` (sdpa attention).

The counts do not depend on the weights (random) or on timing. The table is
printed and written to `--results` (benchmarks/results/op_counts.md).
"""

import argparse
import collections
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "op_counts.md")
SHORT, LONG = 4, 12  # generated tokens of the two runs whose difference is counted
BATCH, PROMPT, WIDTH, HEADS, LAYERS, VOCABULARY = 2, 8, 128, 2, 2, 1000


def count_ops(run):
    """`(operators dispatched, Counter by operator)` while `run()` runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = collections.Counter()

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        run()
    return sum(counts.values()), counts


def per_step(generate):
    """Operators per decoding step: `(count(LONG tokens) - count(SHORT tokens)) / (LONG - SHORT)`."""
    generate(SHORT)  # warm-up
    short, _ = count_ops(lambda: generate(SHORT))
    long, _ = count_ops(lambda: generate(LONG))
    return (long - short) / (LONG - SHORT)


def prompt_arrays():
    import numpy as np

    ids = np.random.default_rng(0).integers(3, VOCABULARY, (BATCH, PROMPT)).astype("int32")
    return ids, np.ones_like(ids)


def hf_generate(model, **inputs):
    """`steps -> None`: transformers' greedy `generate` of exactly `steps` tokens."""
    import torch

    def generate(steps):
        with torch.no_grad():
            model.generate(**inputs, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                           num_beams=1)

    return generate


def kbert_generate(generator_class, model, inputs):
    """`steps -> None`: kbert's eager greedy generator of exactly `steps` tokens (no end id)."""
    return lambda steps: generator_class(model, max_new_tokens=steps, end_id=-1, jit_compile=False)(inputs)


def gpt2_row():
    import torch
    import transformers

    import kbert
    from kbert.generation import CausalLMGenerator

    ids, mask = prompt_arrays()
    kbert_model = kbert.models.GPT2(vocabulary_size=VOCABULARY, num_layers=LAYERS, num_heads=HEADS,
                                    hidden_dim=WIDTH, intermediate_dim=4 * WIDTH, dropout=0.0,
                                    end_id=0)
    config = transformers.GPT2Config(vocab_size=VOCABULARY, n_layer=LAYERS, n_head=HEADS, n_embd=WIDTH,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=0,
                                     bos_token_id=0, eos_token_id=0)
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    hf = hf_generate(hf_model, input_ids=torch.tensor(ids, dtype=torch.long),
                     attention_mask=torch.tensor(mask, dtype=torch.long))
    kb = kbert_generate(CausalLMGenerator, kbert_model, {"token_ids": ids, "padding_mask": mask})
    return "GPT-2 decoding step", per_step(kb), per_step(hf)


def seq2seq_row(name):
    import torch
    import transformers

    import kbert
    from kbert.generation import Seq2SeqGenerator

    ids, mask = prompt_arrays()
    sizes = dict(vocabulary_size=VOCABULARY, num_layers=LAYERS, num_heads=HEADS, hidden_dim=WIDTH,
                 intermediate_dim=4 * WIDTH, dropout=0.0)
    if name == "T5":
        kbert_model = kbert.models.T5(**sizes)
        config = transformers.T5Config(vocab_size=VOCABULARY, d_model=WIDTH, d_kv=WIDTH // HEADS,
                                       d_ff=4 * WIDTH, num_layers=LAYERS, num_heads=HEADS,
                                       dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
        hf_model = transformers.T5ForConditionalGeneration(config).eval()
    else:
        kbert_model = kbert.models.BART(**sizes, max_positions=64)
        config = transformers.BartConfig(vocab_size=VOCABULARY, d_model=WIDTH, encoder_layers=LAYERS,
                                         decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                                         decoder_attention_heads=HEADS, encoder_ffn_dim=4 * WIDTH,
                                         decoder_ffn_dim=4 * WIDTH, max_position_embeddings=64,
                                         dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                                         forced_bos_token_id=None, forced_eos_token_id=None)
        hf_model = transformers.BartForConditionalGeneration(config).eval()
    hf = hf_generate(hf_model, input_ids=torch.tensor(ids, dtype=torch.long),
                     attention_mask=torch.tensor(mask, dtype=torch.long))
    kb = kbert_generate(Seq2SeqGenerator, kbert_model,
                        {"encoder_token_ids": ids, "encoder_padding_mask": mask})
    return f"{name} decoding step", per_step(kb), per_step(hf)


def bert_row(length=128):
    import numpy as np
    import torch
    import transformers

    import kbert

    sizes = dict(num_layers=LAYERS, num_heads=12, hidden_dim=768, intermediate_dim=3072)
    encoder = kbert.models.Encoder(vocabulary_size=VOCABULARY, max_positions=512, dropout=0.0, **sizes)
    config = transformers.BertConfig(vocab_size=VOCABULARY, num_hidden_layers=LAYERS,
                                     attn_implementation="sdpa")
    hf_model = transformers.BertModel(config).eval()
    ids = np.random.default_rng(0).integers(3, VOCABULARY, (BATCH, length))
    inputs = {"token_ids": torch.tensor(ids, dtype=torch.int32),
              "segment_ids": torch.zeros((BATCH, length), dtype=torch.int32),
              "padding_mask": torch.ones((BATCH, length), dtype=torch.int32)}
    hf_inputs = {"input_ids": torch.tensor(ids), "token_type_ids": torch.zeros((BATCH, length), dtype=torch.long),
                 "attention_mask": torch.ones((BATCH, length), dtype=torch.long)}
    with torch.no_grad():
        encoder(inputs)
        kbert_count, _ = count_ops(lambda: encoder(inputs))
        hf_count, _ = count_ops(lambda: hf_model(**hf_inputs))
    return f"bert_base-width forward ({LAYERS} layers, {BATCH}×{length})", kbert_count, hf_count


def table(rows):
    """The Markdown table of `(workload, kbert ops, transformers ops)` rows, with the ratio."""
    lines = ["| workload | kbert aten ops | transformers aten ops | kbert / transformers |",
             "|---|---:|---:|---:|"]
    for workload, kbert_count, hf_count in rows:
        lines.append(f"| {workload} | {kbert_count:g} | {hf_count:g} | {kbert_count / hf_count:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=RESULTS)
    args = parser.parse_args(argv)
    import keras

    if keras.backend.backend() != "torch":
        sys.exit("op_counts.py counts PyTorch operators: run it with KERAS_BACKEND=torch.")
    keras.utils.set_random_seed(0)
    rows = [gpt2_row(), seq2seq_row("T5"), seq2seq_row("BART"), bert_row()]
    text = table(rows)
    print(text)
    header = ("# aten operators dispatched per step, kbert vs transformers (eager PyTorch, CPU)\n\n"
              "`KERAS_BACKEND=torch python benchmarks/op_counts.py`; see the script's docstring for "
              "the configurations.\n\n")
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w") as file:
        file.write(header + text + "\n")


if __name__ == "__main__":
    main()
