"""What the decoding loops share: options, the compiled loop, and its body.

`Generator` is the base of `Seq2SeqGenerator` (encoder-decoders, `kbert.models.T5`)
and `CausalLMGenerator` (decoder-only models, `kbert.models.GPT2`). A
subclass prepares the token buffer and the caches and says how one step's
logits are computed; this base runs one `keras.ops.while_loop` over a fixed
number of steps around it, choosing each next token with
`kbert.generation.samplers`, stopping row by row at the end id (then padding
with the pad id) and for good once every row has ended.

The loop is XLA-compiled on TensorFlow and JAX (`kbert.backend.ops.compile_loop`); on PyTorch
it stays a Python loop under `torch.no_grad`, whose per-step model call is
compiled by `torch.compile` with `jit_compile=True` (`kbert.backend.ops.compiled_step_method`).
The loop never reads a key/value cache again after passing it to the model,
so it runs inside `kbert.in_place_cache_writes()`: on
PyTorch's fast path the layers then write each step's keys and values into
the caches instead of copying them (XLA reuses the loop's buffers on
TensorFlow and JAX anyway).
"""

import keras
import numpy as np
from keras import ops

from kbert.backend.fast_paths import in_place_cache_writes
from kbert.backend.ops import column_writer, compile_loop, compiled_step_method, jit_compiles_by_default
from kbert.arguments import number, one_of, positive_int, positive_number
from kbert.input_checks import check_ids_in_range, checked_upstream
from kbert.generation.samplers import (
    STRATEGIES,
    beam_step,
    best_beams,
    initial_beam_scores,
    next_tokens,
)


class Generator:
    """The options and the decoding loop of kbert's generators (a base class).

    Subclasses set `INTERFACE` (the methods the loop calls on the model) and
    `MODEL_KIND` (named in the error when a model lacks them), and implement
    `_generate(seed_state, *inputs)`, which calls `_decode`.

    Args:
        model: the backbone to decode with.
        max_new_tokens: length of the generated buffer.
        strategy: one of `kbert.generation.samplers.STRATEGIES`.
        temperature, top_k, top_p: sampling options (`filter_logits`).
        num_beams, length_penalty: beam-search options.
        use_cache: incremental decoding with key/value caches.
        jit_compile: `"auto"` (XLA on TensorFlow and JAX, eager on PyTorch),
            or `True`/`False`; `True` on PyTorch compiles the cached step
            with `torch.compile`.
        seed: seed of the sampling `keras.random.SeedGenerator`.
        end_id, pad_id: default to the model's.

    Example:
    >>> Generator.check_model(object())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Generation needs a model ...
    """

    INTERFACE = ()
    MODEL_KIND = "a model"
    # Whether `_generate` reads its inputs' shapes as Python ints (see `compile_loop`).
    STATIC_INPUT_SHAPES = False

    def __init__(self, model, max_new_tokens=64, strategy="greedy", temperature=1.0, top_k=None,
                 top_p=None, num_beams=4, length_penalty=1.0, use_cache=True, jit_compile="auto",
                 seed=None, end_id=None, pad_id=None):
        self.check_model(model)
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
        self.end_id = model.end_id if end_id is None else int(end_id)
        self.pad_id = model.pad_id if pad_id is None else int(pad_id)
        if jit_compile not in ("auto", True, False):
            raise ValueError(f"jit_compile must be 'auto', True or False; received {jit_compile!r}.")
        if jit_compile == "auto":
            jit_compile = jit_compiles_by_default()
        self.jit_compile = jit_compile
        self.seed_generator = keras.random.SeedGenerator(seed)
        self._function = compile_loop(
            self._generate, model, jit_compile, reduce_retracing=not self.STATIC_INPUT_SHAPES
        )

    @classmethod
    def check_model(cls, model):
        """Raise a `ValueError` unless `model` offers the methods and ids the loop uses."""
        needed = cls.INTERFACE + ("vocabulary_size", "pad_id", "end_id")
        missing = [name for name in needed if not hasattr(model, name)]
        if missing:
            raise ValueError(
                f"Generation needs a model with {', '.join(needed)}, such as {cls.MODEL_KIND}; "
                f"{type(model).__name__} lacks {', '.join(missing)}."
            )

    def _compiled_step(self, name):
        """The model's per-step method, under `torch.compile` where asked for."""
        if self.jit_compile and self.use_cache:
            return compiled_step_method(self.model, name)
        return getattr(self.model, name)

    def _read_inputs(self, inputs, names):
        """The int32 NumPy arrays `inputs[name]` for `names`, checked to be `(batch, length)` alike,
        the first (the token ids) to be ids of the model's vocabulary."""
        missing = [name for name in names if name not in inputs]
        if missing:
            raise ValueError(f"inputs lack {missing}; received keys {sorted(inputs)}.")
        arrays = [np.asarray(inputs[name], "int32") for name in names]
        if arrays[0].ndim != 2 or any(array.shape != arrays[0].shape for array in arrays):
            raise ValueError(
                f"{' and '.join(names)} must all be (batch, length); received "
                f"{[array.shape for array in arrays]}."
            )
        check_ids_in_range(arrays[0], self.model.vocabulary_size, names[0])
        return arrays

    def _run(self, *inputs):
        """The compiled loop on int32 `inputs` (checked by `_read_inputs`): generated ids as int32 NumPy.

        The layers skip their own id checks, which on PyTorch's eager loop
        would read ids back to the host at every step.
        """
        tensors = [ops.convert_to_tensor(np.asarray(x, "int32")) for x in inputs]
        with checked_upstream(), in_place_cache_writes():
            tokens, seed_state = self._function(self.seed_generator.state.value, *tensors)
        self.seed_generator.state.assign(seed_state)
        return np.asarray(ops.convert_to_numpy(tokens), "int32")

    def _generate(self, seed_state, *inputs):
        raise NotImplementedError(f"Generator is abstract: {type(self).__name__} must define _generate.")

    def _decode(self, next_logits, tokens, caches, offset, seed_state):
        """The loop: `max_new_tokens` ids written into `tokens` from column `offset`.

        Args:
            next_logits: `(step index, tokens, caches) -> (logits (rows, vocab), caches)`.
            tokens: the int32 buffer `(batch * num_beams, offset + max_new_tokens)`.
            caches: a tuple of per-row tensors the steps update (reordered with the beams).
            offset: the buffer column of the first new id.

        Returns:
            `(ids (batch, max_new_tokens), seed_state)`.
        """
        steps, beams = self.max_new_tokens, self.num_beams
        rows = ops.shape(tokens)[0]
        finished = ops.zeros((rows,), "bool")
        scores = initial_beam_scores(rows // beams, beams)
        # The step's constants as tensors made once: on eager PyTorch a Python
        # number or list in a step is a host-to-device copy at every step.
        pad_id, end_id = (ops.convert_to_tensor(i, "int32") for i in (self.pad_id, self.end_id))
        write_column = column_writer(offset)

        def cond(index, tokens, caches, finished, scores, seed_state):
            return ops.logical_not(ops.all(finished))  # at most `steps` steps: `maximum_iterations`

        def body(index, tokens, caches, finished, scores, seed_state):
            logits, caches = next_logits(index, tokens, caches)
            logits = ops.cast(logits, "float32")
            if beams > 1:
                order, next_ids, scores = beam_step(logits, scores, finished, beams, self.pad_id)
                tokens = ops.take(tokens, order, axis=0)
                caches = tuple(ops.take(cache, order, axis=0) for cache in caches)
                finished = ops.take(finished, order, axis=0)
            else:
                next_ids, seed_state = next_tokens(
                    logits, seed_state, self.seed_generator, self.strategy,
                    temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                )
            next_ids = ops.where(finished, pad_id, ops.cast(next_ids, "int32"))
            tokens = write_column(tokens, index, next_ids)
            finished = ops.logical_or(finished, ops.equal(next_ids, end_id))
            return index + 1, tokens, caches, finished, scores, seed_state

        loop_vars = (ops.convert_to_tensor(0, "int32"), tokens, caches, finished, scores, seed_state)
        _, tokens, _, _, scores, seed_state = ops.while_loop(cond, body, loop_vars, maximum_iterations=steps)
        tokens = tokens[:, offset : offset + steps]
        if beams > 1:
            tokens = best_beams(tokens, scores, beams, self.end_id, self.length_penalty)
        return tokens, seed_state
