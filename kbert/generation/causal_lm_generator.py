"""The decoding loop of decoder-only language models: prompts continued in one compiled loop."""

import numpy as np
from keras import ops

from kbert.backend import fast_paths
from kbert.backend.ops import take_indices
from kbert.generation.generator import Generator


def check_left_padded(padding_mask):
    """Raise a `ValueError` unless every row of `padding_mask` is 0s then 1s, ending in a 1.

    >>> check_left_padded(np.array([[0, 1, 1], [1, 1, 1]]))
    """
    padding_mask = np.asarray(padding_mask)
    if not np.isin(padding_mask, (0, 1)).all():
        raise ValueError("padding_mask must hold 0s and 1s only.")
    bad = np.flatnonzero(np.any(np.diff(padding_mask, axis=1) < 0, axis=1) | (padding_mask[:, -1] == 0))
    if bad.size:
        raise ValueError(
            "Prompts must be padded on the left (each padding_mask row 0s then 1s, ending in a 1, "
            f"so that new tokens follow the text); rows {bad.tolist()} are not."
        )


class CausalLMGenerator(Generator):
    """Continues prompts with a decoder-only model such as `kbert.models.GPT2`.

    `kbert.tasks.CausalLM.generate` builds and keeps these for its backbone.

    Prompts of different lengths share a batch padded on the left; the model
    gives each row its own positions (`cumsum(mask) - 1`), so a row decodes as
    it would alone. With `use_cache` the prompt but its last token is run
    once, filling per-layer key/value caches of `prompt length +
    max_new_tokens` positions, then each step runs the model on one token;
    without it each step re-runs the model over the whole buffer (the
    baseline the cache is measured against). The loop, its compilation and
    the strategies (`"greedy"`, `"sample"` with `temperature`, `top_k` and
    `top_p`, `"beam"`) are those of `kbert.generation.generator.Generator`;
    each row stops at `end_id` and is padded with `pad_id` after it.

    Args:
        model: a `kbert.models.GPT2` (any model with `attention_caches`,
            `call_with_cache` (which fills the caches from the prompt without
            logits when passed `logits=False`), `decode`, `vocabulary_size`,
            `end_id`, `pad_id`).
        max_new_tokens: length of the generated buffer.
        **options: those of `Generator` (`strategy`, `temperature`, `top_k`,
            `top_p`, `num_beams`, `length_penalty`, `use_cache`,
            `jit_compile`, `seed`, `end_id`, `pad_id`).

    Call arguments:
        inputs: dict with `token_ids` and `padding_mask`, `(batch, prompt_length)`,
            padded on the left.

    Returns:
        int32 NumPy `(batch, max_new_tokens)`: the new ids, the prompts excluded.

    Example:
    >>> from kbert.models import GPT2
    >>> model = GPT2(vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8,
    ...              intermediate_dim=16, max_positions=16, end_id=0)
    >>> generator = CausalLMGenerator(model, max_new_tokens=4)
    >>> generator({"token_ids": [[0, 5, 6], [7, 8, 9]], "padding_mask": [[0, 1, 1], [1, 1, 1]]}).shape
    (2, 4)
    """

    INTERFACE = ("attention_caches", "call_with_cache", "decode")
    MODEL_KIND = "a decoder-only backbone such as kbert.models.GPT2"
    # The prompt length lays out the buffer, so each length gets its own program.
    STATIC_INPUT_SHAPES = True

    def __init__(self, model, max_new_tokens=64, **options):
        super().__init__(model, max_new_tokens=max_new_tokens, **options)
        self._step = self._compiled_step("call_with_cache")
        self._unpadded_prompt = False

    def __call__(self, inputs):
        token_ids, padding_mask = self._read_inputs(inputs, ("token_ids", "padding_mask"))
        check_left_padded(padding_mask)
        limit = getattr(self.model, "max_positions", None)
        longest = int(padding_mask.sum(axis=1).max()) + self.max_new_tokens
        if limit is not None and longest > limit:
            raise ValueError(
                f"The longest prompt plus max_new_tokens={self.max_new_tokens} needs {longest} "
                f"positions; the model has {limit}."
            )
        # An unpadded prompt fills the caches with the causal rule as a flag to the
        # fused kernel (no mask tensor). Read here, from the host's copy; only
        # PyTorch's loop runs eagerly: a traced loop would keep the first call's
        # answer for later prompts of the same shape.
        self._unpadded_prompt = fast_paths.active() and bool(padding_mask.all())
        return self._run(token_ids, padding_mask)

    def _generate(self, seed_state, token_ids, padding_mask):
        model, steps, beams = self.model, self.max_new_tokens, self.num_beams
        if beams > 1:
            token_ids = ops.repeat(token_ids, beams, axis=0)
            padding_mask = ops.repeat(padding_mask, beams, axis=0)
        rows, prompt_length = token_ids.shape
        tokens = ops.concatenate([token_ids, ops.full((rows, steps), self.pad_id, "int32")], axis=1)
        mask = ops.concatenate([padding_mask, ops.ones((rows, steps), "int32")], axis=1)
        last = prompt_length - 1  # the buffer column step 0 reads
        caches = ()
        if self.use_cache:
            caches = model.attention_caches(rows, prompt_length + steps)
            if last > 0:
                prompt_mask = None if self._unpadded_prompt else mask
                _, caches = model.call_with_cache(
                    tokens[:, :last], prompt_mask, caches, 0, logits=False
                )

        def next_logits(index, tokens, caches):
            position = last + index
            if self.use_cache:
                current = take_indices(tokens, position, axis=1)
                logits, caches = self._step(current, mask, caches, position)
                return logits[:, 0], caches
            return ops.take(model.decode(tokens, mask), position, axis=1), caches

        return self._decode(next_logits, tokens, caches, prompt_length, seed_state)
