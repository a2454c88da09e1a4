"""Draw the attention pattern of each attention layer, like the papers' figures.

    python examples/attention_patterns.py [--length 1024] [--output attention_patterns.png]

Three panels, query rows against key columns (black = attends): dense
attention, BigBird (global first/last blocks, a window of three blocks,
random blocks; head 0 of the layer's fixed plan) and Longformer (a sliding
window, dilated in the second half of the heads, with two global tokens).
The patterns come from the layers themselves (`attention_pattern`), so the
picture is exactly what the kernels compute.
"""

import argparse
import os

import numpy as np

import kbert


def patterns(length, block_size, window):
    bigbird = kbert.layers.BigBirdAttention(
        num_heads=2, key_dim=8, block_size=block_size, num_random_blocks=3
    )
    longformer = kbert.layers.LongformerAttention(
        num_heads=2, key_dim=8, window=window, dilation=[1, 2]
    )
    global_positions = [0, length // 2]
    return {
        "dense": np.ones((length, length), bool),
        f"BigBird (block {block_size}, 3 random)": bigbird.attention_pattern(length)[0],
        f"Longformer (window {window}, 2 global)": longformer.attention_pattern(
            length, global_positions
        )[0],
        "Longformer, dilation 2": longformer.attention_pattern(length, global_positions)[1],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--output", default="attention_patterns.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = patterns(args.length, args.block_size, args.window)
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4.4))
    for ax, (title, pattern) in zip(axes, panels.items()):
        ax.imshow(~pattern, cmap="gray", interpolation="nearest")
        ax.set_title(f"{title}\n{pattern.mean():.1%} of {args.length}² pairs", fontsize=9)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    figure.savefig(args.output, dpi=110)
    for title, pattern in panels.items():
        print(f"{title:40s} attends to {pattern.mean():6.1%} of the pairs")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
