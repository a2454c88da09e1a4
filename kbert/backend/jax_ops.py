"""The JAX side of `kbert.backend.ops`: what kbert asks JAX that Keras cannot.

`kbert.backend.ops` picks this module once, on the JAX backend; the rest of
kbert never imports it. JAX is imported inside the functions.
"""

import os

import numpy as np

# Whether a generator's loop is XLA-compiled unless told otherwise (`jit_compile="auto"`).
JIT_COMPILES_BY_DEFAULT = True
# Whether Keras' `fit`, `evaluate` and `predict` hold the variables' values outside the variables while
# they run (JAX's stateless loops put the newest back at the end, `jax_state_sync`).
LOOPS_DETACH_VARIABLES = True

DROPOUT_PRNGS = ("threefry", "philox4x32", "rbg", "unsafe_rbg")


def is_eager_tensor(x):
    """True unless `x` is a JAX tracer (inside `jax.jit`, `grad`, …)."""
    import jax

    return not isinstance(x, jax.core.Tracer)


def scale_loss_for_replicas(loss):
    """The loss as it is: JAX computes one global program, so its means are global already."""
    return loss


def replica_total(value):
    """`(value, 1)`: under `keras.distribution` JAX's sums are global already."""
    return value, 1


def framework_random_state():
    """Empty: every random draw on JAX goes through Keras' seeds."""
    return np.zeros(0, np.uint8)


def set_framework_random_state(state):
    """Nothing to restore on JAX."""


def fused_attention_supports(dtype):
    """Whether `keras.ops.dot_product_attention` compiles for `dtype`: not float16 on the CPU.

    JAX's XLA attention asks for float32 accumulation of float16 products,
    which XLA's CPU `dot_general` rejects under `jax.jit` ("precision
    'F16_F16_F32' is not supported").
    """
    import jax
    import keras

    return keras.backend.standardize_dtype(dtype) != "float16" or jax.default_backend() != "cpu"


def value_and_gradients(fn, xs):
    """`(fn(xs), gradients)` by `jax.value_and_grad`."""
    import jax

    return jax.value_and_grad(fn)(xs)


def compile_loop(fn, model, jit_compile, reduce_retracing=True):
    """`fn` under `jax.jit`, the model's variables passed as arguments (`keras.StatelessScope`),
    so that weights are not baked into the program; `fn` itself without `jit_compile`."""
    import jax
    import keras

    if not jit_compile:
        return fn
    variables = list(model.trainable_variables) + list(model.non_trainable_variables)

    def stateless(values, seed_state, *inputs):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return fn(seed_state, *inputs)

    jitted = jax.jit(stateless)
    return lambda seed_state, *inputs: jitted([v.value for v in variables], seed_state, *inputs)


def compiled_step_method(model, name):
    """`model.<name>`: the whole decoding loop is compiled on JAX, not each step."""
    return getattr(model, name)


def few_calls_outputs(model, inputs):
    """One compiled call of the whole model (`predict_on_batch`): JAX would compile every op of an eager call."""
    return model.predict_on_batch(inputs)


def dropout_prng(choice=None):
    """The PRNG kbert's dropout draws its bits from on JAX, one of `DROPOUT_PRNGS`.

    `choice` is a layer's own (`Dropout(dropout_prng=...)`, kept in its
    config); None takes the process default, which `KBERT_JAX_DROPOUT_PRNG`
    names; unset, it is `rbg` on a GPU or TPU
    and `threefry` on the CPU: both draw the same masks over a sharded batch
    as on one device, so that a run on several devices equals one device's
    (`philox4x32` does not compile sharded). `threefry` is JAX's default
    and what Keras' `Dropout` draws: 20 rounds of 32-bit integer arithmetic
    per pair of words (rolled into a loop on the CPU), and a bert_base
    training step of 256 × 128 tokens draws 1.23 billion words (every
    dropout mask, attention probabilities included). `philox4x32` makes four
    words from 10 rounds of multiplications and gives the same bits on CPU,
    GPU and TPU (JAX's `jax.random` documentation); one bert_base layer's
    attention-probability dropout runs 2–4× faster than threefry's on
    this project's CPU (`benchmarks/jax_step_anatomy.py`). But JAX 0.10
    cannot partition its `mulhi` over a sharded batch (the compilation
    fails), so under a `keras.distribution` it is refused. `rbg` and
    `unsafe_rbg` draw from XLA's `RngBitGenerator` (the fastest on TPU, per
    JAX's documentation; their bits differ by platform; `rbg` seeds its key
    through threefry, a few words a draw). A CPU timing is no GPU timing:
    `benchmarks/accelerator.py` compares them on one. JAX's global
    `jax_default_prng_impl` cannot make this choice: Keras hands JAX raw
    two-word threefry keys, which an `rbg` default rejects.
    """
    import keras

    distributed = keras.distribution.distribution() is not None
    source = "dropout_prng"
    if choice is None:
        source, choice = "KBERT_JAX_DROPOUT_PRNG", os.environ.get("KBERT_JAX_DROPOUT_PRNG")
    if choice is None:
        import jax

        return "rbg" if jax.default_backend() in ("gpu", "tpu") else "threefry"
    if choice not in DROPOUT_PRNGS:
        raise ValueError(f"{source} must be one of {DROPOUT_PRNGS}; received {choice!r}.")
    if choice == "philox4x32" and distributed:
        raise ValueError(f"{source}=philox4x32 does not compile under a keras.distribution "
                         "(JAX cannot partition it); use threefry, rbg or unsafe_rbg.")
    return choice


def dropout(x, rate, seed_generator, prng=None):
    """Inverted dropout of `x` at `rate`, its mask drawn with `dropout_prng(prng)`'s generator.

    threefry is Keras' own draw (`keras.random.dropout`); another generator
    is seeded by the next seed of `seed_generator` (as Keras' would be).
    """
    import keras

    prng = dropout_prng(prng)
    if prng == "threefry":
        return keras.random.dropout(x, rate, seed=seed_generator)
    return prng_dropout(x, rate, seed_generator.next(), prng)


def prng_dropout(x, rate, seed, prng):
    """Inverted dropout of `x` at `rate`, its mask drawn with JAX's `prng` implementation.

    `seed` is a Keras seed (two `uint32` words, as a `SeedGenerator` gives):
    the key itself of `threefry` and `philox4x32`; `rbg`'s four words are
    drawn from it through threefry (as JAX seeds an `rbg` key). The same
    seed drops the same entries. Kept entries are scaled by `1 / (1 - rate)`,
    as Keras' `Dropout` does.
    """
    import jax
    import jax.numpy as jnp

    seed = jnp.asarray(seed, "uint32")
    impl = "threefry2x32" if prng == "threefry" else prng
    key_shape = jax.random.key_data(jax.random.key(0, impl=impl)).shape
    if key_shape != seed.shape:  # rbg's 4 words, from the seed through threefry
        seed = jax.random.bits(jax.random.wrap_key_data(seed, impl="threefry2x32"), key_shape, jnp.uint32)
    key = jax.random.wrap_key_data(seed, impl=impl)
    keep = 1.0 - rate
    kept = jax.random.bernoulli(key, keep, jnp.shape(x))
    return jax.lax.select(kept, x / keep, jnp.zeros_like(x))


def attention_bias(bias, query_length, key_length):
    """`bias` (4-D) broadcast to the scores' `(query_length, key_length)` in its last two axes.

    On a GPU, Keras' JAX `dot_product_attention` takes cuDNN's flash kernel
    only where JAX's `check_layout` accepts the bias, and that wants both
    lengths in full: a padding mask's `(batch, 1, 1, keys)` bias sends it
    to XLA's attention, which materializes the scores in float32 (25 GB for
    bert_base at 16,384 tokens). Broadcast, the bias costs `batch ×
    query_length × key_length` values (8 MB for a 256 × 128 bf16 batch).
    """
    import keras

    shape = (1,) * (4 - len(bias.shape)) + tuple(bias.shape)
    if shape[2:] == (query_length, key_length):
        return bias
    return keras.ops.broadcast_to(bias, (*shape[:2], query_length, key_length))
