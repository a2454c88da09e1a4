"""Decoding loops for encoder-decoder models, as one compiled loop with static shapes.

Why not keras-hub's samplers: they drive decoder-only `CausalLM`s through a
prompt buffer and a single `call_with_cache` function; an encoder-decoder
needs the encoder output and the per-layer cross-attention caches beside the
self-attention cache, per-sequence stopping at EOS and beam reordering of all
of them, so the loop is written here against the small interface of
`kbert.models.T5` (`encode`, `decode`, `cross_attention_caches`,
`self_attention_caches`, `decode_step`).

The loop never reads a self-attention cache again after passing it to
`decode_step`, so it asks for `cache_write="in_place"`: on PyTorch the layers
then write each step's keys and values into the caches instead of copying
them (XLA reuses the loop's buffers on TensorFlow and JAX anyway).
"""


import functools
import types

import keras
import numpy as np
from keras import ops

from kbert.arguments import number, one_of, positive_int, positive_number
from kbert.layers.attention_mask import MASKED_SCORE

STRATEGIES = ("greedy", "sample", "beam")

# What a model offers the loop (see `kbert.models.T5`).
GENERATION_INTERFACE = (
    "encode",
    "decode",
    "cross_attention_caches",
    "self_attention_caches",
    "decode_step",
)


def check_generation_interface(model):
    """Raise a `ValueError` unless `model` offers the methods and ids the decoding loop uses."""
    missing = [
        name
        for name in GENERATION_INTERFACE + ("vocabulary_size", "pad_id", "end_id", "decoder_start_id")
        if not hasattr(model, name)
    ]
    if missing:
        raise ValueError(
            "Generation needs an encoder-decoder backbone such as kbert.models.T5; "
            f"{type(model).__name__} lacks {', '.join(missing)}."
        )


def _compile(fn, model, jit_compile):
    """`fn(seed_state, *inputs)` as the backend runs it: the whole loop under XLA on TF/JAX.

    On JAX the model variables become arguments of the jitted function
    (`keras.StatelessScope`), so weights are not baked into the program. On
    PyTorch the loop stays a Python loop, run under `torch.no_grad`; there
    `jit_compile` compiles the model's step function instead (see
    `Seq2SeqGenerator`).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow" and jit_compile:
        import tensorflow as tf

        return tf.function(fn, jit_compile=True, reduce_retracing=True)
    if backend == "jax" and jit_compile:
        import jax

        variables = list(model.trainable_variables) + list(model.non_trainable_variables)

        def stateless(values, seed_state, *inputs):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(seed_state, *inputs)

        jitted = jax.jit(stateless)
        return lambda seed_state, *inputs: jitted(
            [v.value for v in variables], seed_state, *inputs
        )
    if backend == "torch":
        import torch

        def no_grad(*args):
            with torch.no_grad():
                return fn(*args)

        return no_grad
    return fn


def _torch_compiled_step(model):
    """`model.decode_step` under `torch.compile`, with a compilation cache of its own.

    By default Dynamo guards every attribute of every layer of the model,
    which costs milliseconds per step, and Keras setting an attribute on the
    first call forces a second compilation. The guards on the model's modules
    are therefore dropped. That is safe only while one model uses the cache,
    and Dynamo keeps its cache on the code object, so the step is compiled
    from a copy of `decode_step` with a code object of its own.
    """
    import torch

    function = type(model).decode_step
    copy = types.FunctionType(
        function.__code__.replace(),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    guards = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
    return functools.partial(torch.compile(copy, options=guards), model)


class Seq2SeqGenerator:
    """Generates target token ids from encoder inputs with a `kbert.models.T5`.

    `kbert.tasks.Seq2SeqLM.generate` builds and keeps these for its backbone.

    One `keras.ops.while_loop` over a fixed-size buffer of `max_new_tokens`
    (XLA-compiled on TensorFlow and JAX, a Python loop under `torch.no_grad`
    on PyTorch, with the model's step compiled by `torch.compile` when
    `jit_compile=True`), stopping when every sequence has produced `end_id`; after its
    end id a sequence is padded with `pad_id`. With `use_cache` each step runs
    the decoder on one token against per-layer key/value caches (cross-attention
    keys and values are projected once); without it each step re-runs the
    decoder over the whole buffer (causally masked), which is the baseline the
    cache is measured against.

    Strategies (ALGORITHMS.md §7): `"greedy"` (argmax); `"sample"`, from
    `softmax(logits / temperature)` after keeping the `top_k` largest logits
    and then the smallest set of most likely tokens whose mass reaches
    `top_p` (the reference order: temperature, top-k, top-p); `"beam"`, a
    fixed-width beam search of `num_beams` beams where finished beams stay in
    the beam at no further cost, and the best final beam maximises
    `log p / length ** length_penalty`.

    Args:
        model: a `kbert.models.T5` (or any model with its generation interface).
        max_new_tokens: length of the generated buffer.
        strategy: one of `STRATEGIES`.
        temperature, top_k, top_p: sampling options.
        num_beams, length_penalty: beam-search options.
        use_cache: incremental decoding with key/value caches.
        jit_compile: `"auto"` (default) compiles the loop with XLA on
            TensorFlow and JAX and runs eagerly on PyTorch; `True` on PyTorch
            also compiles the cached decoder step with `torch.compile`
            (inductor), which removes the per-layer Python overhead of eager
            decoding but pays about a minute of compilation on CPU for
            t5_small at the first call (and again for a new batch size).
        seed: seed of the sampling `keras.random.SeedGenerator`.
        start_id, end_id, pad_id: default to the model's `decoder_start_id`,
            `end_id` and `pad_id` (T5: 0, 1, 0; BART: 2, 2, 1).

    Call arguments:
        inputs: dict with `encoder_token_ids` and `encoder_padding_mask`, `(batch, length)`.

    Returns:
        int32 NumPy `(batch, max_new_tokens)`, the start id excluded.

    Example:
    ```python
    generator = Seq2SeqGenerator(kbert.models.t5_small(), max_new_tokens=32)
    ids = generator({"encoder_token_ids": ids, "encoder_padding_mask": mask})
    ```
    """

    def __init__(
        self,
        model,
        max_new_tokens=64,
        strategy="greedy",
        temperature=1.0,
        top_k=None,
        top_p=None,
        num_beams=4,
        length_penalty=1.0,
        use_cache=True,
        jit_compile="auto",
        seed=None,
        start_id=None,
        end_id=None,
        pad_id=None,
    ):
        check_generation_interface(model)
        self.model = model
        self.max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        self.strategy = one_of("strategy", strategy, STRATEGIES)
        self.temperature = positive_number("temperature", temperature)
        self.top_k = positive_int("top_k", top_k, optional=True)
        if top_k is not None and top_k > model.vocabulary_size:
            raise ValueError(f"top_k must be in [1, {model.vocabulary_size}]; received {top_k}.")
        self.top_p = number("top_p", top_p, 0, 1, low_open=True, optional=True)
        num_beams = positive_int("num_beams", num_beams)
        self.num_beams = num_beams if strategy == "beam" else 1
        self.length_penalty = number("length_penalty", length_penalty)
        self.use_cache = bool(use_cache)
        self.start_id = model.decoder_start_id if start_id is None else int(start_id)
        self.end_id = model.end_id if end_id is None else int(end_id)
        self.pad_id = model.pad_id if pad_id is None else int(pad_id)
        if jit_compile not in ("auto", True, False):
            raise ValueError(f"jit_compile must be 'auto', True or False; received {jit_compile!r}.")
        torch_backend = keras.backend.backend() == "torch"
        if jit_compile == "auto":
            jit_compile = not torch_backend
        self.seed_generator = keras.random.SeedGenerator(seed)
        self._decode_step = model.decode_step
        if torch_backend and jit_compile and use_cache:
            self._decode_step = _torch_compiled_step(model)
        self._function = _compile(self._generate, model, jit_compile)

    def __call__(self, inputs):
        missing = {"encoder_token_ids", "encoder_padding_mask"} - set(inputs)
        if missing:
            raise ValueError(f"inputs lack {sorted(missing)}.")
        token_ids = ops.convert_to_tensor(np.asarray(inputs["encoder_token_ids"], "int32"))
        padding_mask = ops.convert_to_tensor(np.asarray(inputs["encoder_padding_mask"], "int32"))
        if len(token_ids.shape) != 2 or tuple(token_ids.shape) != tuple(padding_mask.shape):
            raise ValueError(
                "encoder_token_ids and encoder_padding_mask must both be (batch, length); "
                f"received {tuple(token_ids.shape)} and {tuple(padding_mask.shape)}."
            )
        tokens, seed_state = self._function(self.seed_generator.state.value, token_ids, padding_mask)
        self.seed_generator.state.assign(seed_state)
        return np.asarray(ops.convert_to_numpy(tokens), "int32")

    # --- The loop ---------------------------------------------------------------

    def _generate(self, seed_state, token_ids, padding_mask):
        model, steps, beams = self.model, self.max_new_tokens, self.num_beams
        batch = ops.shape(token_ids)[0]
        encoder_outputs = model.encode(token_ids, padding_mask)
        if beams > 1:
            encoder_outputs = ops.repeat(encoder_outputs, beams, axis=0)
            padding_mask = ops.repeat(padding_mask, beams, axis=0)
        rows = batch * beams
        tokens = ops.concatenate(
            [
                ops.full((rows, 1), self.start_id, "int32"),
                ops.full((rows, steps), self.pad_id, "int32"),
            ],
            axis=1,
        )
        if self.use_cache:
            cross_caches = model.cross_attention_caches(encoder_outputs)
            caches = model.self_attention_caches(rows, steps)
        else:
            caches = ()
        finished = ops.zeros((rows,), "bool")
        # Beam scores: only the first beam of each row is live at the start.
        scores = ops.tile(
            ops.convert_to_tensor([[0.0] + [MASKED_SCORE] * (beams - 1)], "float32"), (batch, 1)
        )

        def next_logits(index, tokens, caches):
            if self.use_cache:
                current = ops.expand_dims(ops.take(tokens, index, axis=1), 1)
                return self._decode_step(
                    current, index, caches, cross_caches, padding_mask, cache_write="in_place"
                )
            decoder_ids = tokens[:, :steps]
            logits = model.decode(
                decoder_ids, ops.ones_like(decoder_ids), encoder_outputs, padding_mask
            )
            return ops.take(logits, index, axis=1), caches

        def cond(index, tokens, caches, finished, scores, seed_state):
            return ops.logical_and(index < steps, ops.logical_not(ops.all(finished)))

        def body(index, tokens, caches, finished, scores, seed_state):
            logits, caches = next_logits(index, tokens, caches)
            logits = ops.cast(logits, "float32")
            if beams > 1:
                order, next_ids, scores = self._beam_step(logits, scores, finished)
                tokens = ops.take(tokens, order, axis=0)
                caches = tuple(ops.take(cache, order, axis=0) for cache in caches)
                finished = ops.take(finished, order, axis=0)
            else:
                next_ids, seed_state = self._next_token(logits, seed_state)
            next_ids = ops.where(finished, self.pad_id, ops.cast(next_ids, "int32"))
            tokens = ops.slice_update(tokens, [0, index + 1], ops.expand_dims(next_ids, 1))
            finished = ops.logical_or(finished, ops.equal(next_ids, self.end_id))
            return index + 1, tokens, caches, finished, scores, seed_state

        loop_vars = (ops.convert_to_tensor(0, "int32"), tokens, caches, finished, scores, seed_state)
        _, tokens, _, _, scores, seed_state = ops.while_loop(cond, body, loop_vars)
        tokens = tokens[:, 1:]
        if beams > 1:
            tokens = self._best_beams(tokens, scores, batch)
        return tokens, seed_state

    def _next_token(self, logits, seed_state):
        """Greedy or sampled ids `(rows,)` from float32 logits `(rows, vocab)`."""
        if self.strategy == "greedy":
            return ops.argmax(logits, axis=-1), seed_state
        logits = logits / self.temperature
        if self.top_k is not None:
            kth = ops.top_k(logits, self.top_k)[0][:, -1:]
            logits = ops.where(logits < kth, MASKED_SCORE, logits)
        if self.top_p is not None and self.top_p < 1:
            ordered = ops.top_k(logits, ops.shape(logits)[-1])[0]
            probabilities = ops.softmax(ordered, axis=-1)
            # Keep a token while the mass before it is below top_p (at least one).
            keep = (ops.cumsum(probabilities, axis=-1) - probabilities) < self.top_p
            threshold = ops.min(ops.where(keep, ordered, np.inf), axis=-1, keepdims=True)
            logits = ops.where(logits < threshold, MASKED_SCORE, logits)
        state = self.seed_generator.state
        with keras.StatelessScope(state_mapping=[(state, seed_state)]) as scope:
            ids = keras.random.categorical(logits, 1, seed=self.seed_generator)[:, 0]
            seed_state = scope.get_current_value(state)
        return ids, seed_state

    def _beam_step(self, logits, scores, finished):
        """Reorder indices `(rows,)`, next ids `(rows,)` and scores `(batch, beams)`."""
        beams = self.num_beams
        vocabulary = ops.shape(logits)[-1]
        log_probabilities = ops.log_softmax(logits, axis=-1)
        # A finished beam continues with padding at no cost.
        padding_row = ops.where(ops.arange(vocabulary) == self.pad_id, 0.0, MASKED_SCORE)
        log_probabilities = ops.where(
            finished[:, None], ops.cast(padding_row, "float32")[None, :], log_probabilities
        )
        candidates = ops.reshape(scores, (-1, 1)) + log_probabilities
        candidates = ops.reshape(candidates, (-1, beams * vocabulary))
        scores, flat = ops.top_k(candidates, beams)
        source_beam = flat // vocabulary
        next_ids = ops.reshape(flat % vocabulary, (-1,))
        batch = ops.shape(scores)[0]
        order = ops.reshape(ops.arange(batch)[:, None] * beams + source_beam, (-1,))
        return order, next_ids, scores

    def _best_beams(self, tokens, scores, batch):
        """The beam with the best length-normalised score, per row: `(batch, steps)`."""
        beams, steps = self.num_beams, self.max_new_tokens
        is_end = ops.equal(tokens, self.end_id)
        first_end = ops.argmax(ops.cast(is_end, "int32"), axis=-1)
        lengths = ops.where(ops.any(is_end, axis=-1), first_end + 1, steps)
        lengths = ops.reshape(ops.cast(lengths, "float32"), (batch, beams))
        normalized = scores / lengths**self.length_penalty
        best = ops.argmax(normalized, axis=-1)
        tokens = ops.reshape(tokens, (batch, beams, steps))
        return ops.take_along_axis(tokens, best[:, None, None], axis=1)[:, 0, :]
