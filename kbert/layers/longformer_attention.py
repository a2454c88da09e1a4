"""Longformer sliding-window attention with global tokens, static shapes."""

import keras
import numpy as np
from keras import ops

from kbert.backend.ops import constant_tensors, is_eager_tensor, pad
from kbert.arguments import positive_int
from kbert.layers.multi_head_attention import MultiHeadAttention, mask_heads
from kbert.layers.sparse_attention import (
    attend_blocks,
    attention_with_pattern,
    check_self_attention,
    group_blocks,
    map_groups,
    neighbour_blocks,
    padded_key_mask,
    slice_blocks,
    static_length,
)


@keras.saving.register_keras_serializable(package="kbert")
class LongformerAttention(MultiHeadAttention):
    """Longformer self-attention: a sliding window plus global tokens, linear in the length.

    Each token attends to the keys at distance `dilation·k`, `|k| <= window`
    (a one-sided window `w`: HF's `attention_window` is `2w`), and to every
    global token. Global tokens (`global_attention_mask` 1) attend to every
    real key with their own projections `query_global`, `key_global`,
    `value_global` (docs/algorithms.md §13). Global keys are taken out of the window
    and appended as extra score columns, computed with the local key and
    value, in one joint softmax, as in the reference.

    Computation is chunked: queries in blocks of `w` against the 3 blocks
    around them (`3w` keys, a third more than the minimal band) and the global
    keys, each block a batch entry of the dense kernel
    (`kbert.backend.ops.fused_attention`, PyTorch's fused attention), which
    applies the window as a mask; the global rows are one more call of it. The
    blocks run in groups of about `sparse_attention.GROUP_QUERIES` queries, so
    the live copies of their keys stay the same size whatever the length:
    O(n·w) memory, and with a fused kernel no score tensor at all.
    Dilation (one value, or one per head) reorders each head's tokens by
    residue modulo the dilation, which turns a dilated window into a plain one
    on each residue class; heads are grouped by dilation. Any length
    works: the sequence is padded to a multiple of `w·dilation` inside the
    layer and the padding masked and stripped, so a short sequence (under
    `w+1` tokens) simply gets full attention, as in the reference.

    Static shapes and the global-token limit: the global positions are found
    with a fixed-size `top_k`, so at most `max_global_tokens` (64 by default)
    tokens per sequence are global; shapes never depend on the data and the
    layer compiles under XLA. An eager call with more global tokens raises a
    `ValueError`; in a compiled call the first `max_global_tokens` of them are
    global and the rest act as local tokens. The extra cost is O(n·g) for `g =
    max_global_tokens`. Without a `global_attention_mask` the global
    projections are unused.

    Self-attention with a `padding_mask` only: `value`/`key` inputs and an
    `attention_mask` are rejected, and the sequence length must be static.
    Outputs at padding positions are not zeroed (the reference zeroes them);
    they never influence real positions.

    Args:
        num_heads: number of heads.
        key_dim: width of each head.
        window: one-sided window `w` (Longformer-base: 256).
        dilation: window dilation, an int or a list of one int per head.
        max_global_tokens: most global tokens per sequence.
        **kwargs: the other `MultiHeadAttention` arguments.

    Call arguments:
        query: `(batch, sequence, width)`.
        padding_mask: 0/1 `(batch, sequence)`.
        global_attention_mask: optional 0/1 `(batch, sequence)`: 1 for global tokens.
        training: whether attention dropout is active.
        return_probabilities: also return the attention probabilities, a
            dense `(batch, heads, n, n)` map (0 outside the window and the
            global tokens; global rows are those of the global projections),
            computed densely for sequences of at most
            `sparse_attention.DENSE_PROBABILITIES_MAX_LENGTH` tokens.
        head_mask: optional `(heads,)` or `(batch, heads)` factors on each
            head's output (local and global rows), as in `MultiHeadAttention`.

    Example:
    >>> attention = LongformerAttention(num_heads=2, key_dim=4, window=3)
    >>> x = keras.ops.ones((1, 10, 8))
    >>> glob = keras.ops.one_hot(keras.ops.zeros((1,), "int32"), 10)
    >>> tuple(attention(x, global_attention_mask=glob).shape)
    (1, 10, 8)

    References:
        Beltagy et al., "Longformer: The Long-Document Transformer", 2020.
    """

    takes_global_attention_mask = True

    def __init__(
        self, num_heads, key_dim, window=256, dilation=1, max_global_tokens=64, **kwargs
    ):
        super().__init__(num_heads, key_dim, **kwargs)
        self.window = positive_int("window", window)
        if np.isscalar(dilation):
            self.dilation = positive_int("dilation", dilation)
        elif len(dilation) != self.num_heads:
            raise ValueError(
                "dilation must be a positive integer or a list of one per head "
                f"({self.num_heads}); received {dilation}."
            )
        else:
            self.dilation = [positive_int("dilation", x) for x in dilation]
        self.max_global_tokens = positive_int("max_global_tokens", max_global_tokens)

    @property
    def head_dilations(self):
        """The dilation of each head, as a list."""
        if isinstance(self.dilation, int):
            return [self.dilation] * self.num_heads
        return list(self.dilation)

    def build(self, query_shape, value_shape=None, key_shape=None):
        super().build(query_shape)
        self.query_global_dense, self.key_global_dense, self.value_global_dense = (
            self._projections("_global", query_shape, query_shape, query_shape)
        )

    def head_projections(self):
        """The local projections and the global ones, each split into heads."""
        return super().head_projections() + [
            (self.query_global_dense, self.key_dim),
            (self.key_global_dense, self.key_dim),
            (self.value_global_dense, self.value_dim),
        ]

    def arguments_keeping_heads(self, heads):
        """`num_heads`, and the kept heads' dilations where they are given per head."""
        arguments = super().arguments_keeping_heads(heads)
        if not isinstance(self.dilation, int):
            arguments["dilation"] = [self.dilation[head] for head in heads]
        return arguments

    def attention_pattern(self, sequence_length, global_positions=()):
        """The equivalent dense pattern: bool NumPy `(num_heads, n, n)`, True = attends.

        Global rows and columns are True (global rows use the global projections).
        """
        n = int(sequence_length)
        distance = np.arange(n)[:, None] - np.arange(n)[None, :]
        pattern = np.stack(
            [(np.abs(distance) <= self.window * d) & (distance % d == 0) for d in self.head_dilations]
        )
        positions = list(global_positions)
        pattern[:, positions, :] = True
        pattern[:, :, positions] = True
        return pattern

    def call(self, query, value=None, key=None, padding_mask=None, attention_mask=None,
             training=None, global_attention_mask=None, return_probabilities=False, head_mask=None):
        check_self_attention(
            self,
            query,
            value,
            key,
            attention_mask,
            padding_mask=padding_mask,
            global_attention_mask=global_attention_mask,
        )
        if global_attention_mask is None:
            return super().call(
                query, padding_mask=padding_mask, training=training,
                return_probabilities=return_probabilities, head_mask=head_mask,
            )
        n = static_length(self, query)
        q, k, v = self._heads(query, "")
        real = padded_key_mask(query, padding_mask, n, n)
        slots, slot_valid, one_hot = self._global_slots(real, global_attention_mask)
        is_global = ops.any(one_hot, axis=-1)  # those beyond g act as local tokens
        if return_probabilities:
            return self._call_with_probabilities(
                query, (q, k, v), real, is_global, training, head_mask
            )
        g = slots.shape[1]

        def gather(x):  # (batch, n, ...) -> (batch, g, ...)
            index = ops.reshape(slots, (-1, g) + (1,) * (len(x.shape) - 2))
            return ops.take_along_axis(x, index, axis=1)

        context = self._windowed(
            q,
            k,
            v,
            ops.logical_and(real, ops.logical_not(is_global)),
            (gather(k), gather(v), slot_valid),
            training,
        )

        # Global rows: every real key, with the global projections.
        q_global = self.split_heads(self.query_global_dense(gather(query)), self.key_dim)
        k_global = self.split_heads(self.key_global_dense(query), self.key_dim)
        v_global = self.split_heads(self.value_global_dense(query), self.value_dim)
        mask = real[:, None, None, :]
        global_context = super().attend(q_global, k_global, v_global, mask=mask, training=training)
        placed = ops.einsum("bns,bshd->bnhd", ops.cast(one_hot, global_context.dtype), global_context)
        context = ops.where(is_global[:, :, None, None], placed, context)
        return self._output(context, head_mask)

    def _heads(self, query, suffix):
        """The query, key and value heads `(batch, n, heads, dim)` of the projections `<name><suffix>`."""
        return tuple(
            self.split_heads(getattr(self, f"{name}{suffix}_dense")(query), dim)
            for name, dim in (("query", self.key_dim), ("key", self.key_dim), ("value", self.value_dim))
        )

    def _output(self, context, head_mask):
        """The output projection of the `(batch, n, heads, value_dim)` context, its heads masked."""
        return self.output_dense(self.merge_heads(mask_heads(self, context, head_mask)))

    def _global_slots(self, real, global_attention_mask):
        """`(slots, slot_valid, one_hot)`: the first `g` global positions, in a fixed number of slots.

        `slots` int `(batch, g)` (global positions first, in order),
        `slot_valid` bool `(batch, g)`, `one_hot[b, i, s]`: position `i` sits
        in valid slot `s`; `g = min(max_global_tokens, n)`.
        """
        n = real.shape[1]
        is_global = ops.logical_and(ops.cast(global_attention_mask, "bool"), real)
        self._check_global_count(is_global)
        g = min(self.max_global_tokens, n)
        order = ops.cast(is_global, "float32") * (2.0 * n) - ops.arange(n, dtype="float32")[None, :]
        _, slots = ops.top_k(order, k=g)
        slot_valid = ops.take_along_axis(is_global, slots, axis=1)
        one_hot = ops.logical_and(
            ops.equal(slots[:, None, :], ops.arange(n, dtype=slots.dtype)[None, :, None]),
            slot_valid[:, None, :],
        )
        return slots, slot_valid, one_hot

    def _call_with_probabilities(self, query, local_heads, real, is_global, training, head_mask):
        """`(outputs, probabilities)`: the global-token attention computed densely.

        Local rows attend to their window and every global token, global rows
        (with the global projections) to every real key; the probabilities
        come as a dense `(batch, heads, n, n)` map, 0 outside the pattern.
        """
        window = self.attention_pattern(query.shape[1])[None]
        local_mask = ops.logical_or(window, is_global[:, None, None, :])
        keys = real[:, None, None, :]
        context, probabilities = attention_with_pattern(
            self, *local_heads, keys, local_mask, training
        )
        global_context, global_probabilities = attention_with_pattern(
            self, *self._heads(query, "_global"), keys, ops.ones_like(local_mask), training
        )
        context = ops.where(is_global[:, :, None, None], global_context, context)
        probabilities = ops.where(is_global[:, None, :, None], global_probabilities, probabilities)
        return self._output(context, head_mask), mask_heads(self, probabilities, head_mask, heads_axis=1)

    def _check_global_count(self, is_global):
        if not is_eager_tensor(is_global):
            return
        counts = ops.convert_to_numpy(ops.sum(ops.cast(is_global, "int32"), axis=1))
        if counts.size and counts.max() > self.max_global_tokens:
            raise ValueError(
                f"A sequence has {int(counts.max())} global tokens; this "
                f"LongformerAttention takes at most max_global_tokens={self.max_global_tokens}."
            )

    def attend_with_probabilities(self, query, key, value, mask=None, training=None):
        """The window attention computed densely with `attention_pattern(n)` as a mask.

        Returns `(context, probabilities)`, the probabilities a dense `(batch,
        heads, n, n)` map, 0 outside the window; for sequences of at most
        `sparse_attention.DENSE_PROBABILITIES_MAX_LENGTH` tokens.
        """
        pattern = self.attention_pattern(static_length(self, query))
        return attention_with_pattern(self, query, key, value, mask, pattern, training)

    def attend(self, query, key, value, mask=None, training=None):
        """Sliding-window kernel without global tokens; `mask` is the `(batch, 1, 1, n)` padding mask."""
        n = static_length(self, query)
        return self._windowed(query, key, value, padded_key_mask(query, mask, n, n), None, training)

    def _windowed(self, query, key, value, key_valid, global_keys, training):
        """Window attention of each dilation group of heads; `(batch, n, heads, dim)` out."""
        dilations = self.head_dilations
        groups = sorted(set(dilations))
        if len(groups) == 1:
            return self._band(query, key, value, key_valid, global_keys, groups[0], training)
        outputs, order = [], []
        for dilation in groups:
            heads = [i for i, d in enumerate(dilations) if d == dilation]
            order.extend(heads)

            def select(x, heads=heads):
                return ops.take(x, np.array(heads), axis=2)

            selected = None
            if global_keys is not None:
                selected = (select(global_keys[0]), select(global_keys[1]), global_keys[2])
            outputs.append(
                self._band(
                    select(query), select(key), select(value), key_valid, selected, dilation, training
                )
            )
        inverse = np.argsort(order)
        return ops.take(ops.concatenate(outputs, axis=2), inverse, axis=2)

    def _band(self, query, key, value, key_valid, global_keys, dilation, training):
        n, w, heads = query.shape[1], self.window, query.shape[2]
        unit = w * dilation
        group, groups = group_blocks(-(-n // unit), unit)
        blocks = group * groups
        padded = blocks * unit

        # (B, n, ...) -> (B, dilation, blocks, w, ...): token (block·w + j)·dilation + residue.
        def blocked(x):
            if padded > n:
                x = pad(x, [(0, 0), (0, padded - n)] + [(0, 0)] * (len(x.shape) - 2))
            return ops.moveaxis(ops.reshape(x, (-1, blocks, w, dilation) + tuple(x.shape[2:])), 3, 1)

        def pad_blocks(x):  # a zero block before the first and after the last
            return pad(x, [(0, 0), (0, 0), (1, 1)] + [(0, 0)] * (len(x.shape) - 3))

        q = blocked(query)  # (B, z, blocks, w, h, d)
        # Keys and values heads-first: (B, z, blocks + 2, h, w, d).
        k, v = (pad_blocks(ops.swapaxes(blocked(x), 3, 4)) for x in (key, value))
        valid = pad_blocks(blocked(key_valid))  # (B, z, blocks + 2, w)

        (in_window,) = constant_tensors(self, "window_table", w)  # (w, 3w)
        if global_keys is not None:
            global_keys = self._spread(global_keys, (ops.shape(q)[0], dilation, group), w)

        def group_context(start):  # (B, z, group, w, h, d) for blocks [start, start + group)
            k_band, v_band = neighbour_blocks(k, 2, start, group), neighbour_blocks(v, 2, start, group)
            band_valid = ops.concatenate(neighbour_blocks(valid, 2, start, group), axis=-1)
            mask = ops.logical_and(band_valid[:, :, :, None, :], in_window)  # (B, z, group, w, 3w)
            if global_keys is not None:
                k_band, v_band = k_band + [global_keys[0]], v_band + [global_keys[1]]
                mask = ops.concatenate([mask, global_keys[2]], axis=-1)
            return attend_blocks(
                super(LongformerAttention, self).attend,
                slice_blocks(q, 2, start, group),
                ops.concatenate(k_band, axis=-2),
                ops.concatenate(v_band, axis=-2),
                mask[:, :, :, None],
                training,
            )

        context = map_groups(self, group_context, groups, group, training, axis=2)
        context = ops.moveaxis(context, 1, 3)  # (B, blocks, w, z, h, d)
        return ops.reshape(context, (-1, padded, heads, context.shape[-1]))[:, :n]

    @staticmethod
    def window_table(w):
        """Bool NumPy `(w, 3w)`: whether query `i` of a block attends key `j` of the three blocks around it."""
        offset = np.arange(3 * w)[None, :] - w - np.arange(w)[:, None]
        return (np.abs(offset) <= w,)

    def _spread(self, global_keys, leading, w):
        """The global keys and values, heads first, and their mask, for every block of a group.

        `(batch, g, heads, dim)` keys and values become `leading + (heads, g,
        dim)`, the `(batch, g)` slot mask `leading + (w, g)`; `leading` is
        `(batch, dilation, group)`. Broadcasts: the group's one concatenation copies them.
        """
        k_global, v_global, slot_valid = global_keys
        heads, g = k_global.shape[2], slot_valid.shape[1]

        def spread(x):
            return ops.broadcast_to(ops.swapaxes(x, 1, 2)[:, None, None], leading + (heads, g, x.shape[-1]))

        mask = ops.broadcast_to(slot_valid[:, None, None, None, :], leading + (w, g))
        return spread(k_global), spread(v_global), mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "window": self.window,
                "dilation": self.dilation,
                "max_global_tokens": self.max_global_tokens,
            }
        )
        return config
