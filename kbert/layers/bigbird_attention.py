"""BigBird block-sparse attention (ITC: global, sliding and random blocks)."""

import keras
import numpy as np
from keras import ops

from kbert.arguments import non_negative_int, positive_int
from kbert.backend.ops import constant_tensors, pad
from kbert.layers.multi_head_attention import MultiHeadAttention
from kbert.layers.sparse_attention import (
    attend_blocks,
    attention_with_pattern,
    group_blocks,
    map_groups,
    padded_key_mask,
    slice_blocks,
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
    globals, without repetition (docs/algorithms.md §12). The result equals dense
    attention restricted to `attention_pattern(n)`.

    The random plan is a constant of the configuration: for a padded length it
    is drawn from `numpy.random.default_rng([seed, num_blocks])`, once, and
    reused for every call, in training and inference alike (the reference
    library redraws it per call in training and uses block 0 at inference).
    Shapes are therefore static and the layer compiles under XLA. It is
    computed by blocks with the dense kernel (`kbert.backend.ops.fused_attention`,
    PyTorch's fused attention): the two global blocks against every key, and
    each middle query block against its `5 + r` key blocks (`key_blocks(n)`,
    one gather), the blocks folded into the kernel's batch and run in groups
    of about `sparse_attention.GROUP_QUERIES` queries one after another.
    Memory is O(n·b), never an n×n tensor, and with a fused kernel no score
    tensor at all.

    Short sequences: like the reference (`transformers` BigBird), a sequence of
    `n <= (5 + 2·num_random_blocks)·block_size` tokens (704 with the defaults)
    takes full attention; `attention_pattern(n)` is then all True.

    Asked for its probabilities (`return_probabilities=True`), it computes the
    same attention densely with `attention_pattern(n)` as a mask and returns
    them as a dense `(batch, heads, n, n)` map, 0 outside the pattern, for
    sequences of at most `sparse_attention.DENSE_PROBABILITIES_MAX_LENGTH` tokens.

    Self-attention with a `padding_mask` only: `value`/`key` inputs and an
    `attention_mask` are rejected, and the sequence length must be static.

    Args:
        num_heads: number of heads.
        key_dim: width of each head.
        block_size: tokens per block (BigBird: 64).
        num_random_blocks: random key blocks per query block (BigBird: 3).
        seed: seed of the random block plan.
        random_plan_heads: the heads of the seed's random plan that this
            layer's heads take, by default `0 .. num_heads-1`; a layer with
            pruned heads lists the heads it kept, so each keeps its blocks
            (`kbert.analysis.prune_heads` sets it).
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

    def __init__(self, num_heads, key_dim, block_size=64, num_random_blocks=3, seed=0,
                 random_plan_heads=None, **kwargs):
        super().__init__(num_heads, key_dim, **kwargs)
        self.block_size = positive_int("block_size", block_size)
        self.num_random_blocks = non_negative_int("num_random_blocks", num_random_blocks)
        self.seed = non_negative_int("seed", seed)
        self.random_plan_heads = _checked_plan_heads(random_plan_heads, self.num_heads)
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
            plan_heads = self.random_plan_heads or range(self.num_heads)
            plan = np.zeros((max(plan_heads) + 1, num_blocks - 2, r), "int32")
            for head in range(len(plan)):
                for i in range(1, num_blocks - 1):
                    excluded = {i - 1, i, i + 1}
                    eligible = [j for j in range(1, num_blocks - 1) if j not in excluded]
                    plan[head, i - 1] = rng.choice(eligible, size=r, replace=False)
            self._plans[num_blocks] = plan[list(plan_heads)]
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
        query = self._padded(query, num_blocks * b)
        # Keys and values heads-first: (batch, heads, padded, dim).
        key, value = (ops.transpose(self._padded(x, num_blocks * b), (0, 2, 1, 3)) for x in (key, value))
        global_context = self._global_rows(query, key, value, key_mask, training)
        middle_context = self._middle_rows(query, key, value, key_mask, n, training)
        context = ops.concatenate(
            [global_context[:, :b], middle_context, global_context[:, b:]], axis=1
        )
        return context[:, :n]

    def attend_with_probabilities(self, query, key, value, mask=None, training=None):
        """The same attention computed densely with `attention_pattern(n)` as a mask.

        Returns `(context, probabilities)`, the probabilities a dense
        `(batch, heads, n, n)` map, 0 outside the pattern; for sequences of at
        most `sparse_attention.DENSE_PROBABILITIES_MAX_LENGTH` tokens.
        """
        pattern = self.attention_pattern(static_length(self, query))
        return attention_with_pattern(self, query, key, value, mask, pattern, training)

    def _padded(self, x, length):
        """`(batch, n, heads, dim)` padded with zeros to `length` tokens."""
        if x.shape[1] == length:
            return x
        return pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0), (0, 0)))

    def _global_rows(self, query, key, value, key_mask, training):
        """Global query blocks 0 and nb-1, dense over every key: `(batch, 2b, heads, dim)`."""
        b = self.block_size
        q_global = ops.concatenate([query[:, :b], query[:, -b:]], axis=1)
        key, value = (ops.transpose(x, (0, 2, 1, 3)) for x in (key, value))
        return super().attend(q_global, key, value, mask=key_mask[:, None, None, :], training=training)

    def _middle_rows(self, query, key, value, key_mask, n, training):
        """Middle query blocks 1..nb-2: `(batch, (nb-2)·b, heads, dim)`.

        Each attends to its `5 + r` key blocks of `key_blocks(n)`, gathered
        heads-first, in groups of `group` query blocks (the rows padded to
        whole groups).
        """
        b, h, padded = self.block_size, self.num_heads, key_mask.shape[1]
        middle = padded // b - 2
        group, groups = group_blocks(middle, b)

        index, table, used = constant_tensors(self, "middle_row_tables", n, group * groups, padded)
        q_mid = pad(query[:, b:-b], ((0, 0), (0, (group * groups - middle) * b), (0, 0), (0, 0)))
        q_mid = ops.reshape(q_mid, (-1, group * groups, b, h, query.shape[-1]))
        k_flat, v_flat = (ops.reshape(x, (-1, h * padded // b, b, x.shape[-1])) for x in (key, value))
        mask_blocks = ops.reshape(key_mask, (-1, padded // b, b))

        def gather(x, rows_index):  # (B, group·h·slots, b, ...) -> (B, group, h, slots·b, ...)
            x = ops.take(x, ops.reshape(rows_index, (-1,)), axis=1)
            return ops.reshape(x, (-1, group, h, table.shape[-1] * b) + tuple(x.shape[3:]))

        def group_context(start):  # (B, group, b, h, d) for middle rows [start, start + group)
            keys = slice_blocks(index, 0, start, group)
            mask = ops.logical_and(
                gather(mask_blocks, slice_blocks(table, 0, start, group))[:, :, :, None, :],
                slice_blocks(used, 0, start, group),
            )
            return attend_blocks(
                super(BigBirdAttention, self).attend,
                slice_blocks(q_mid, 1, start, group),
                gather(k_flat, keys),
                gather(v_flat, keys),
                mask,
                training,
            )

        context = map_groups(self, group_context, groups, group, training, axis=1)
        return ops.reshape(context[:, :middle], (-1, middle * b, h, value.shape[-1]))

    def middle_row_tables(self, sequence_length, rows, padded):
        """NumPy `(index, table, used)` of `_middle_rows` for `rows` rows of a `padded`-token sequence.

        `table` is `key_blocks(sequence_length, rows)` with unused slots at
        block 0, `index` the same blocks counted over every head's blocks
        (head-major), and `used` `(rows, heads, 1, slots·block_size)` whether
        each key position's slot is used.
        """
        b, h = self.block_size, self.num_heads
        table = self.key_blocks(sequence_length, rows)  # (rows, h, slots)
        used = np.repeat(table >= 0, b, axis=-1)[:, :, None, :]
        index = np.maximum(table, 0) + np.arange(h)[:, None] * (padded // b)
        return index, np.maximum(table, 0), used

    def arguments_keeping_heads(self, heads):
        """`num_heads`, and the plan heads the kept heads take."""
        plan_heads = self.random_plan_heads or list(range(self.num_heads))
        return {**super().arguments_keeping_heads(heads),
                "random_plan_heads": [plan_heads[head] for head in heads]}

    def key_blocks(self, sequence_length, rows=None):
        """The key blocks each middle query block attends to, one slot per block.

        Args:
            sequence_length: the (unpadded) sequence length, over the full-attention length.
            rows: the number of rows to return (default `num_blocks - 2`);
                rows beyond the middle blocks use no key.

        Returns:
            int32 NumPy `(rows, num_heads, 5 + num_random_blocks)`: row `i - 1`
            holds `[0, i-1, i, i+1, random..., nb-1]` for query block `i`, and
            -1 in a slot that is not used: one that would repeat a block (the
            first at row 1, the last at row nb-2) and every slot of the extra rows.

        >>> layer = BigBirdAttention(num_heads=1, key_dim=4, block_size=2, num_random_blocks=1)
        >>> layer.key_blocks(16, rows=7)[:, 0].tolist()  # 8 blocks: rows for blocks 1..6, one extra
        [[-1, 0, 1, 2, 4, 7], [0, 1, 2, 3, 6, 7], [0, 2, 3, 4, 6, 7], [0, 3, 4, 5, 6, 7],
         [0, 4, 5, 6, 1, 7], [0, 5, 6, 7, 1, -1], [-1, -1, -1, -1, -1, -1]]
        """
        num_blocks = self._num_blocks(sequence_length)
        middle = num_blocks - 2
        rows = middle if rows is None else rows
        i = np.arange(1, middle + 1)[None, :, None]
        first = np.where(i == 1, -1, 0)
        last = np.where(i == middle, -1, num_blocks - 1)
        parts = [first, i - 1, i, i + 1, self.random_plan(sequence_length), last]
        parts = [np.broadcast_to(p, (self.num_heads, middle, p.shape[-1])) for p in parts]
        table = np.concatenate(parts, axis=-1).transpose(1, 0, 2)
        return np.pad(table, ((0, rows - middle), (0, 0), (0, 0)), constant_values=-1).astype("int32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "block_size": self.block_size,
                "num_random_blocks": self.num_random_blocks,
                "seed": self.seed,
                "random_plan_heads": self.random_plan_heads,
            }
        )
        return config


def _checked_plan_heads(plan_heads, num_heads):
    """`plan_heads` as a list of `num_heads` distinct non-negative ints, or None (checked)."""
    if plan_heads is None:
        return None
    heads = [non_negative_int("random_plan_heads", head) for head in plan_heads]
    if len(heads) != num_heads or len(set(heads)) != num_heads:
        raise ValueError(
            f"random_plan_heads must list num_heads={num_heads} distinct heads; "
            f"received {list(plan_heads)}."
        )
    return heads
