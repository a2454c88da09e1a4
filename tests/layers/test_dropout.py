import functools

import keras
import numpy as np
import pytest
from helpers import BACKEND, to_numpy

import kbert
from kbert.backend.jax_ops import DROPOUT_PRNGS, dropout_prng, prng_dropout
from kbert.layers.dropout import Dropout, apply_dropout


def test_no_layer_call_outside_training_or_at_rate_zero():
    x = keras.ops.ones((4, 8))
    assert apply_dropout(Dropout(0.5), x, training=False) is x
    assert apply_dropout(Dropout(0.5), x, training=None) is x
    assert apply_dropout(Dropout(0.0), x, training=True) is x


def test_training_drops_and_rescales():
    """Kept entries are scaled by 1 / (1 - rate); with 4,096 entries some are dropped, some kept."""
    keras.utils.set_random_seed(0)
    values = to_numpy(apply_dropout(Dropout(0.5), keras.ops.ones((64, 64)), training=True))
    assert set(np.unique(values)) == {0.0, 2.0}


def test_the_layer_seed_generator_advances_as_in_keras_dropout():
    """Two calls draw two different masks and leave the seed generator where Keras' own calls do."""
    ours, keras_own = Dropout(0.5, seed=3), keras.layers.Dropout(0.5, seed=3)
    x = keras.ops.ones((16, 16))
    first, second = (to_numpy(apply_dropout(ours, x, training=True)) for _ in range(2))
    for _ in range(2):
        keras_own(x, training=True)
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(to_numpy(ours.seed_generator.state), to_numpy(keras_own.seed_generator.state))


@pytest.mark.skipif(BACKEND != "jax", reason="the dropout PRNG is chosen on JAX only")
@pytest.mark.parametrize("prng", DROPOUT_PRNGS)
def test_each_jax_prng_drops_at_the_rate_and_repeats_a_seed(prng, monkeypatch):
    """A quarter of 4,096 entries dropped (±4 standard deviations), kept ones scaled by 4/3; a seed
    gives the same mask again, another seed another mask; the program's keys are of `prng`, and
    of threefry only where asked for or where an rbg key is seeded."""
    import jax

    monkeypatch.setenv("KBERT_JAX_DROPOUT_PRNG", prng)
    x = keras.ops.ones((64, 64))
    draw = lambda seed: to_numpy(prng_dropout(x, 0.25, np.array([seed, 1], "uint32"), prng))  # noqa: E731
    values = draw(0)
    assert set(np.unique(values)) == {0.0, np.float32(1 / 0.75)}
    assert abs((values == 0).mean() - 0.25) < 4 * np.sqrt(0.25 * 0.75 / values.size)
    np.testing.assert_array_equal(values, draw(0))
    assert not np.array_equal(values, draw(1))
    layer = Dropout(0.25)
    step = str(jax.make_jaxpr(lambda x: apply_dropout(layer, x, training=True))(x))
    impl = "threefry2x32" if prng == "threefry" else prng
    assert str(jax.random.key(0, impl=impl).dtype) in step  # the key type the bits are drawn with
    assert ("key<fry>" in step) == (prng != "philox4x32")  # rbg keys are seeded through threefry


@pytest.mark.skipif(BACKEND != "jax", reason="the dropout PRNG is chosen on JAX only")
def test_an_unknown_jax_prng_is_named(monkeypatch):
    monkeypatch.setenv("KBERT_JAX_DROPOUT_PRNG", "mersenne")
    with pytest.raises(ValueError, match="KBERT_JAX_DROPOUT_PRNG must be one of"):
        apply_dropout(Dropout(0.5), keras.ops.ones((2, 2)), training=True)


@pytest.mark.skipif(BACKEND != "jax", reason="the dropout PRNG is chosen on JAX only")
def test_the_default_bits_partition_and_philox_is_refused_under_a_distribution(monkeypatch):
    """The default (threefry on the CPU, rbg on a GPU or TPU) draws the same mask sharded as on one
    device, with or without a distribution; Philox's bits do not partition in JAX 0.10: refused."""
    import jax

    monkeypatch.delenv("KBERT_JAX_DROPOUT_PRNG", raising=False)
    default = "rbg" if jax.default_backend() in ("gpu", "tpu") else "threefry"
    assert dropout_prng() == default
    with keras.distribution.DataParallel(devices=jax.devices()[:1]).scope():
        assert dropout_prng() == default
        monkeypatch.setenv("KBERT_JAX_DROPOUT_PRNG", "philox4x32")
        with pytest.raises(ValueError, match="does not compile under a keras.distribution"):
            dropout_prng()


@pytest.mark.skipif(BACKEND != "jax", reason="the dropout PRNG is chosen on JAX only")
def test_the_layer_choice_wins_over_the_environment(monkeypatch):
    """`dropout_prng` draws with its own generator whatever `KBERT_JAX_DROPOUT_PRNG` says; None follows it."""
    import jax

    monkeypatch.setenv("KBERT_JAX_DROPOUT_PRNG", "threefry")
    x = keras.ops.ones((8, 8))
    for layer, impl in ((Dropout(0.25, dropout_prng="philox4x32"), "philox4x32"), (Dropout(0.25), "threefry2x32")):
        step = str(jax.make_jaxpr(functools.partial(apply_dropout, layer, training=True))(x))
        assert str(jax.random.key(0, impl=impl).dtype) in step


@pytest.mark.backend_independent  # the config
def test_the_choice_is_kept_in_the_config_and_old_configs_load_as_the_default():
    config = Dropout(0.5, dropout_prng="rbg").get_config()
    assert Dropout.from_config(config).dropout_prng == "rbg"
    del config["dropout_prng"]  # a layer saved before the argument existed
    assert Dropout.from_config(config).dropout_prng is None


TINY = dict(vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
BACKBONES = {
    "bert": lambda **kw: kbert.models.bert_tiny(**TINY, max_positions=8, **kw),
    "gpt2": lambda **kw: kbert.models.GPT2(**TINY, max_positions=8, end_id=0, **kw),
    "t5": lambda **kw: kbert.models.T5(**TINY, **kw),
    "bart": lambda **kw: kbert.models.BART(**TINY, max_positions=8, **kw),
    "xlnet": lambda **kw: kbert.models.XLNet(**TINY, **kw),
    "elmo": lambda **kw: kbert.models.ELMo(hidden_dim=4, cell_dim=8, filters=[(1, 4)], num_layers=1, **kw),
}


def _dropout_prngs(layer, seen=None):
    """The `dropout_prng` of every `Dropout` under `layer` (its attributes, lists of layers included)."""
    seen = set() if seen is None else seen
    if id(layer) in seen:
        return set()
    seen.add(id(layer))
    if isinstance(layer, Dropout):
        return {layer.dropout_prng}
    found = set()
    for value in vars(layer).values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, keras.layers.Layer):
                found |= _dropout_prngs(item, seen)
    return found


@pytest.mark.backend_independent  # the config's threading, the same on every backend
@pytest.mark.parametrize("family", BACKBONES)
def test_a_backbone_passes_its_choice_to_every_dropout_and_keeps_it(family):
    model = BACKBONES[family](dropout_prng="unsafe_rbg")
    assert _dropout_prngs(model) == {"unsafe_rbg"}
    copy = type(model).from_config(model.get_config())
    assert copy.dropout_prng == "unsafe_rbg" and _dropout_prngs(copy) == {"unsafe_rbg"}
    assert _dropout_prngs(BACKBONES[family]()) == {None}


@pytest.mark.backend_independent  # the saved config
def test_a_saved_model_keeps_its_choice(tmp_path):
    path = str(tmp_path / "model.keras")
    BACKBONES["bert"](dropout_prng="philox4x32").save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.dropout_prng == "philox4x32" and _dropout_prngs(loaded) == {"philox4x32"}


@pytest.mark.backend_independent  # argument checking
def test_an_unknown_choice_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"dropout_prng must be None or one of .*received 'mersenne'"):
        Dropout(0.5, dropout_prng="mersenne")
    with pytest.raises(ValueError, match="dropout_prng must be None or one of"):
        BACKBONES["gpt2"](dropout_prng="mersenne")
