"""Which weight layout a decoding-sized matmul reads fastest on this CPU, against the one kbert picks.

    python benchmarks/few_row_layouts.py [--rows 8] [--pool-mb 600] [--repeats 3] [--threads 2]

In eager PyTorch inference on at most `kbert.backend.torch_ops.FEW_ROWS` rows (a
decoding step) a matmul's time is the time to read its weight, and that
depends on the weight's layout. kbert reads a layer's kernel as a contiguous
`(out, in)` and a vocabulary projection (more than `WIDE_OUTPUT` outputs) as
a contiguous `(in, out)`, keeping a transposed copy where the parameter is
stored the other way (`torch_ops.matmul_operand`). The rule was chosen
from this table, and the best layout is the CPU's (its matmul library's) to
decide: rerun it on another machine to check the rule there.

For the weight shapes of t5_small, bert_base and GPT-2 124M, times
`torch.nn.functional.linear` of `--rows` rows on each layout, cycling
through copies of the weight that together fill `--pool-mb`, so that each
call reads its weight from memory rather than from a cache (a decoding step
reads a model's weights once). Prints the best of `--repeats` passes, per
call, the layout kbert reads, and its time against transformers', whose
`Linear` (and tied output head) always reads `(out, in)`: below 1, kbert's
read is faster.
"""

import argparse
import time

import torch

from kbert.backend import torch_ops

SHAPES = {
    "t5_small attention": (512, 512),
    "t5_small feed-forward in": (512, 2048),
    "t5_small feed-forward out": (2048, 512),
    "t5_small logits": (512, 32128),
    "bert_base / GPT-2 attention": (768, 768),
    "GPT-2 fused qkv": (768, 2304),
    "bert_base / GPT-2 feed-forward in": (768, 3072),
    "bert_base / GPT-2 feed-forward out": (3072, 768),
    "GPT-2 logits": (768, 50257),
}


def seconds_per_call(weights, inputs, repeats):
    """Best of `repeats` passes over `weights` (`(out, in)` tensors, any strides) of the time per `linear` call."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for weight in weights:
            torch.nn.functional.linear(inputs, weight)
        best = min(best, (time.perf_counter() - start) / len(weights))
    return best


def measure(in_features, out_features, args):
    """`(out, in)` and `(in, out)` seconds per call for one weight shape."""
    copies = max(2, int(args.pool_mb * 2**20 / (in_features * out_features * 4)))
    out_in = [torch.randn(out_features, in_features) for _ in range(copies)]
    inputs = torch.randn(args.rows, in_features)
    out_in_time = seconds_per_call(out_in, inputs, args.repeats)
    in_out = [weight.T.contiguous().T for weight in out_in]  # the same (out, in) values, stored (in, out)
    del out_in
    return out_in_time, seconds_per_call(in_out, inputs, args.repeats)


def kbert_layout(in_features, out_features, inputs):
    """The layout kbert's few-row path reads a Keras `(in, out)` kernel of this shape in, asked of
    `torch_ops.matmul_operand` itself."""
    kernel = torch.nn.Parameter(torch.empty(in_features, out_features), requires_grad=False)
    with torch.no_grad():
        operand = torch_ops.matmul_operand(inputs, kernel)
    return "(out, in)" if operand.T.is_contiguous() else "(in, out)"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--pool-mb", type=int, default=600, help="memory cycled through per layout")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.rows} rows, float32, {args.threads} threads, weights read from a {args.pool_mb} MB pool\n")
    print("| weight | in × out | (out, in) µs | (in, out) µs | kbert reads | kbert / transformers |")
    print("|---|---|---|---|---|---|")
    for name, (in_features, out_features) in SHAPES.items():
        out_in, in_out = measure(in_features, out_features, args)
        picked = kbert_layout(in_features, out_features, torch.randn(args.rows, in_features))
        ratio = (in_out if picked == "(in, out)" else out_in) / out_in
        print(f"| {name} | {in_features} × {out_features} | {out_in * 1e6:.0f} | {in_out * 1e6:.0f} | "
              f"{picked} | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
