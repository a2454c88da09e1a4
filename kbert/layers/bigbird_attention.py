"""BigBird block-sparse attention (ITC: global, sliding and random blocks)."""

import keras
import numpy as np
from keras import ops

from kbert.arguments import non_negative_int, positive_int
from kbert.layers.multi_head_attention import MultiHeadAttention
from kbert.layers.sparse_attention import (
    group_blocks,
    map_groups,
    neighbour_blocks,
    padded_key_mask,
    slice_blocks,
    softmax_pieces,
    static_length,
)


@keras.saving.register_keras_serializable(package="kbert")
class BigBirdAttention(MultiHeadAttention):
    """BigBird block-sparse self-attention (ITC variant), linear in the sequence length.

    The sequence is cut into blocks of `block_size` tokens (padded to a
    multiple of it; the padding is masked and stripped). The first and last
    blocks are global: they attend to every key and every query attends to
    them. Every other query block `i` attends to the window `{i-1, i, i+1}` and
    to `num_random_blocks` random blocks chosen outside the window and the
    globals, without repetition (ALGORITHMS.md §4). The result equals dense
    attention restricted to `attention_pattern(n)`.

    The random plan is a constant of the configuration: for a padded length it
    is drawn from `numpy.random.default_rng([seed, num_blocks])`, once, and
    reused for every call, in training and inference alike (the reference
    library redraws it per call in training and uses block 0 at inference).
    Shapes are therefore static and the layer compiles under XLA. It is
    computed by blocks (reshapes, slices, concatenation, batched einsum, a
    gather of the random blocks), with the middle query blocks in groups of
    about `sparse_attention.GROUP_QUERIES` queries run one after another:
    memory is O(n·b), never an n×n tensor.

    Short sequences: like the reference (`transformers` BigBird), a sequence of
    `n <= (5 + 2·num_random_blocks)·block_size` tokens (704 with the defaults)
    takes full attention; `attention_pattern(n)` is then all True.

    Self-attention with a `padding_mask` only: `value`/`key` inputs and an
    `attention_mask` are rejected, and the sequence length must be static.

    Args:
        num_heads: number of heads.
        key_dim: width of each head.
        block_size: tokens per block (BigBird: 64).
        num_random_blocks: random key blocks per query block (BigBird: 3).
        seed: seed of the random block plan.
        **kwargs: the other `MultiHeadAttention` arguments (`dropout`,
            `kernel_initializer`, ...).

    Example:
    >>> attention = BigBirdAttention(num_heads=2, key_dim=4, block_size=2,
    ...                              num_random_blocks=1)
    >>> x = keras.ops.ones((1, 20, 8))
    >>> tuple(attention(x).shape)
    (1, 20, 8)
    >>> attention.random_plan(20).shape  # (heads, blocks - 2, random blocks)
    (2, 8, 1)

    References:
        Zaheer et al., "Big Bird: Transformers for Longer Sequences", 2020.
    """

    self_attention_only = True

    def __init__(self, num_heads, key_dim, block_size=64, num_random_blocks=3, seed=0, **kwargs):
        super().__init__(num_heads, key_dim, **kwargs)
        self.block_size = positive_int("block_size", block_size)
        self.num_random_blocks = non_negative_int("num_random_blocks", num_random_blocks)
        self.seed = non_negative_int("seed", seed)
        self._plans = {}

    @property
    def full_attention_length(self):
        """The longest sequence that takes full attention, `(5 + 2r)·b` (as the reference)."""
        return (5 + 2 * self.num_random_blocks) * self.block_size

    def _num_blocks(self, sequence_length):
        return -(-int(sequence_length) // self.block_size)

    def random_plan(self, sequence_length):
        """The random key blocks of each head and middle query block.

        Args:
            sequence_length: the (unpadded) sequence length.

        Returns:
            int32 NumPy array `(num_heads, num_blocks - 2, num_random_blocks)`:
            row `i - 1` holds the random blocks of query block `i`
            (`1 <= i <= num_blocks - 2`). Each is outside `{0, i-1, i, i+1,
            num_blocks-1}`, and a row has no repeats.
        """
        num_blocks = self._num_blocks(sequence_length)
        r = self.num_random_blocks
        if num_blocks - 5 < r:
            raise ValueError(
                f"A sequence of {sequence_length} tokens has {num_blocks} blocks of "
                f"{self.block_size}: too few to draw {r} random blocks outside the "
                "window and the global blocks (need num_blocks >= num_random_blocks + 5)."
            )
        if num_blocks not in self._plans:
            rng = np.random.default_rng([self.seed, num_blocks])
            plan = np.zeros((self.num_heads, num_blocks - 2, r), "int32")
            for head in range(self.num_heads):
                for i in range(1, num_blocks - 1):
                    excluded = {i - 1, i, i + 1}
                    eligible = [j for j in range(1, num_blocks - 1) if j not in excluded]
                    plan[head, i - 1] = rng.choice(eligible, size=r, replace=False)
            self._plans[num_blocks] = plan
        return self._plans[num_blocks].copy()

    def attention_pattern(self, sequence_length):
        """The equivalent dense pattern: bool NumPy `(num_heads, n, n)`, True = attends."""
        n = int(sequence_length)
        if n <= self.full_attention_length:
            return np.ones((self.num_heads, n, n), bool)
        num_blocks, b = self._num_blocks(n), self.block_size
        plan = self.random_plan(n)
        blocks = np.zeros((self.num_heads, num_blocks, num_blocks), bool)
        blocks[:, [0, -1], :] = True
        blocks[:, :, [0, -1]] = True
        for i in range(1, num_blocks - 1):
            blocks[:, i, i - 1 : i + 2] = True
            for head in range(self.num_heads):
                blocks[head, i, plan[head, i - 1]] = True
        pattern = np.repeat(np.repeat(blocks, b, axis=1), b, axis=2)
        return pattern[:, :n, :n]

    def attend(self, query, key, value, mask=None, training=None):
        """Block-sparse kernel; `mask` is the `(batch, 1, 1, n)` key padding mask or `None`."""
        n = static_length(self, query)
        if n <= self.full_attention_length:
            return super().attend(query, key, value, mask=mask, training=training)
        b, num_blocks = self.block_size, self._num_blocks(n)
        key_mask = padded_key_mask(query, mask, n, num_blocks * b)  # (batch, padded) bool
        q = self._blocked(query * ops.cast(self.score_scale, query.dtype), num_blocks)
        k, v = self._blocked(key, num_blocks), self._blocked(value, num_blocks)
        global_context = self._global_rows(q, k, v, key_mask, training)
        mask_blocks = ops.reshape(key_mask, (-1, num_blocks, b))
        middle_context = self._middle_rows(q, k, v, mask_blocks, n, training)
        context = ops.concatenate(
            [global_context[:, :, :b], middle_context, global_context[:, :, b:]], axis=2
        )
        return ops.transpose(context[:, :, :n], (0, 2, 1, 3))

    def _blocked(self, x, num_blocks):
        """`(batch, n, heads, dim)` -> `(batch, heads, blocks, b, dim)`, padded with zeros."""
        b = self.block_size
        x = ops.pad(x, ((0, 0), (0, num_blocks * b - x.shape[1]), (0, 0), (0, 0)))
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (-1, self.num_heads, num_blocks, b, x.shape[-1]))

    def _global_rows(self, q, k, v, key_mask, training):
        """Global query blocks 0 and nb-1, dense over every key: `(batch, heads, 2b, dim)`."""
        h, padded = self.num_heads, key_mask.shape[1]
        q_global = ops.concatenate([q[:, :, 0], q[:, :, -1]], axis=2)  # (B, h, 2b, d)
        k_all = ops.reshape(k, (-1, h, padded, k.shape[-1]))
        v_all = ops.reshape(v, (-1, h, padded, v.shape[-1]))
        scores = ops.einsum("bhqd,bhkd->bhqk", q_global, k_all)
        (probabilities,) = softmax_pieces(
            [(scores, key_mask[:, None, None, :])], self.compute_dtype, self.dropout_layer, training
        )
        return ops.einsum("bhqk,bhkd->bhqd", probabilities, v_all)

    def _middle_rows(self, q, k, v, mask_blocks, n, training):
        """Middle query blocks 1..nb-2: `(batch, heads, (nb-2)·b, dim)`.

        Each attends to [first | window of 3 | random | last] key blocks, in
        groups of `group` query blocks (the rows padded to whole groups). Row
        1's window already holds block 0 and row nb-2's holds block nb-1, so
        their separate first / last copies are masked out.
        """
        num_blocks, b = mask_blocks.shape[1], self.block_size
        middle = num_blocks - 2
        group, groups = group_blocks(middle, b)
        extra = group * groups - middle  # padding rows, dropped at the end

        def pad_rows(x):  # (B, h, rows, b, d) with `extra` zero rows appended
            return ops.pad(x, ((0, 0), (0, 0), (0, extra), (0, 0), (0, 0)))

        q_mid, k_near, v_near = pad_rows(q[:, :, 1:-1]), pad_rows(k), pad_rows(v)
        mask_near = ops.pad(mask_blocks, ((0, 0), (0, extra), (0, 0)), constant_values=False)
        rows = np.arange(1, middle + extra + 1)
        not_second = ops.convert_to_tensor(rows != 1)
        not_penultimate = ops.convert_to_tensor(rows != num_blocks - 2)
        plan = np.pad(self.random_plan(n), ((0, 0), (0, extra), (0, 0)))  # (h, rows, r)
        plan = ops.convert_to_tensor(plan)

        def group_context(start):  # (B, h, group, b, d) for middle rows [start, start + group)
            q_group = slice_blocks(q_mid, 2, start, group)
            k_band = neighbour_blocks(k_near, 2, start, group)  # (B, h, group, 3b, d)
            v_band = neighbour_blocks(v_near, 2, start, group)
            band_mask = neighbour_blocks(mask_near, 1, start, group)  # (B, group, 3b)
            second = slice_blocks(not_second, 0, start, group)[None, None, :, None, None]
            penultimate = slice_blocks(not_penultimate, 0, start, group)[None, None, :, None, None]
            first_mask = ops.logical_and(mask_blocks[:, None, None, None, 0, :], second)
            last_mask = ops.logical_and(mask_blocks[:, None, None, None, -1, :], penultimate)
            random_k, random_v, random_mask = self._random_blocks(
                k, v, mask_blocks, slice_blocks(plan, 1, start, group)
            )
            pieces = [
                (ops.einsum("bhnqd,bhkd->bhnqk", q_group, k[:, :, 0]), first_mask),
                (ops.einsum("bhnqd,bhnkd->bhnqk", q_group, k_band), band_mask[:, None, :, None, :]),
                (ops.einsum("bhnqd,bhnkd->bhnqk", q_group, random_k), random_mask),
                (ops.einsum("bhnqd,bhkd->bhnqk", q_group, k[:, :, -1]), last_mask),
            ]
            p_first, p_band, p_random, p_last = softmax_pieces(
                pieces, self.compute_dtype, self.dropout_layer, training
            )
            return (
                ops.einsum("bhnqk,bhkd->bhnqd", p_first, v[:, :, 0])
                + ops.einsum("bhnqk,bhnkd->bhnqd", p_band, v_band)
                + ops.einsum("bhnqk,bhnkd->bhnqd", p_random, random_v)
                + ops.einsum("bhnqk,bhkd->bhnqd", p_last, v[:, :, -1])
            )

        context = map_groups(self, group_context, groups, group, training, axis=2)
        return ops.reshape(context[:, :, :middle], (-1, self.num_heads, middle * b, v.shape[-1]))

    def _random_blocks(self, k, v, mask_blocks, group_plan):
        """Keys, values and key mask of the random blocks of a group of middle rows.

        Args:
            k, v: `(batch, heads, blocks, b, dim)`.
            mask_blocks: bool `(batch, blocks, b)`.
            group_plan: int `(heads, group, r)`: the rows' random blocks.

        Returns:
            `(batch, heads, group, r·b, dim)` keys and values, and the
            `(batch, heads, group, 1, r·b)` mask.
        """
        h, num_blocks, b = self.num_heads, k.shape[2], self.block_size
        group, width = group_plan.shape[1], self.num_random_blocks * b
        heads_offset = ops.convert_to_tensor(np.arange(h)[:, None, None] * num_blocks, "int32")
        flat = ops.reshape(group_plan + heads_offset, (-1,))

        def gather(x):  # from the (B, h·blocks, b, d) blocks of every head
            x = ops.take(ops.reshape(x, (-1, h * num_blocks, b, x.shape[-1])), flat, axis=1)
            return ops.reshape(x, (-1, h, group, width, x.shape[-1]))

        random_mask = ops.take(mask_blocks, ops.reshape(group_plan, (-1,)), axis=1)
        return gather(k), gather(v), ops.reshape(random_mask, (-1, h, group, 1, width))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "block_size": self.block_size,
                "num_random_blocks": self.num_random_blocks,
                "seed": self.seed,
            }
        )
        return config

