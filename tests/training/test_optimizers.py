import keras
import numpy as np
import pytest
from helpers import to_numpy

from kbert.layers import MaskedLMHead
from kbert.training.optimizers import create_optimizer

NO_DECAY = {"gamma", "beta", "bias"}


def small_model():
    """Every kind of variable a BERT has: table, kernel, bias, LayerNorm gamma and beta."""
    inputs = keras.Input((4,), dtype="int32")
    x = keras.layers.Embedding(10, 6)(inputs)
    x = keras.layers.Dense(6, name="attention_bias")(x)  # a kernel whose path contains "bias"
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(inputs, x)


def test_kbert_heads_name_their_biases_bias():
    head = MaskedLMHead(10)
    head.build((None, None, 6))
    assert head.bias.name == "bias" and head.layer_norm.gamma.name == "gamma"


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_weight_decay_skips_layer_norm_and_bias(name):
    """With zero gradients only decay acts: kernels and tables shrink, LN and biases stay."""
    variables = small_model().trainable_variables
    assert sorted(v.name for v in variables) == ["beta", "bias", "embeddings", "gamma", "kernel"]
    rng = np.random.default_rng(0)
    for variable in variables:  # non-zero everywhere, so a decayed bias would show
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    before = [to_numpy(v) for v in variables]
    optimizer = create_optimizer(
        name, learning_rate=0.1, total_steps=10, warmup_steps=0, weight_decay=0.5
    )
    optimizer.apply_gradients([(keras.ops.zeros(v.shape), v) for v in variables])
    for variable, old in zip(variables, before):
        factor = 1.0 if variable.name in NO_DECAY else 1.0 - 0.1 * 0.5
        np.testing.assert_allclose(
            to_numpy(variable), old * factor, rtol=1e-6, err_msg=variable.path
        )


def test_adamw_settings():
    optimizer = create_optimizer(
        "adamw", learning_rate=2e-4, total_steps=100, warmup_steps=10, beta_2=0.98
    )
    assert isinstance(optimizer, keras.optimizers.AdamW)
    assert optimizer.weight_decay == 0.01 and optimizer.epsilon == 1e-6
    assert optimizer.beta_1 == 0.9 and optimizer.beta_2 == 0.98
    assert optimizer.global_clipnorm == 1.0 and optimizer.clipnorm is None
    assert float(optimizer.learning_rate) == 0.0  # warm-up starts at 0
    optimizer.iterations.assign(10)
    np.testing.assert_allclose(float(optimizer.learning_rate), 2e-4, rtol=1e-6)
    unclipped = create_optimizer("adamw", total_steps=10, warmup_steps=1, clipnorm=None)
    assert unclipped.global_clipnorm is None


def test_lamb_step_follows_the_documented_keras_semantics():
    """Decoupled decay first; bias-corrected Adam direction; trust ratio on every variable."""
    lr, wd, beta_1, beta_2, eps = 0.1, 0.01, 0.9, 0.999, 1e-6
    rng = np.random.default_rng(1)
    kernel_value = rng.normal(size=(3, 4)).astype("float32")
    bias_value = rng.normal(size=(4,)).astype("float32")
    kernel = keras.Variable(kernel_value, name="kernel")
    bias = keras.Variable(bias_value, name="bias")
    grads = [rng.normal(size=(3, 4)).astype("float32"), rng.normal(size=(4,)).astype("float32")]
    optimizer = create_optimizer(
        "lamb", learning_rate=lr, total_steps=10, warmup_steps=0, weight_decay=wd, clipnorm=None
    )
    assert isinstance(optimizer, keras.optimizers.Lamb)
    optimizer.apply_gradients(zip(grads, [kernel, bias]))

    def step(w, g, decay):
        w = w.astype(np.float64) * (1 - lr * wd if decay else 1.0)
        m_hat = (1 - beta_1) * g / (1 - beta_1)
        v_hat = (1 - beta_2) * g**2 / (1 - beta_2)
        update = m_hat / (np.sqrt(v_hat) + eps)
        ratio = np.linalg.norm(w) / np.linalg.norm(update)
        return w - lr * ratio * update

    np.testing.assert_allclose(to_numpy(kernel), step(kernel_value, grads[0], True), rtol=1e-5)
    np.testing.assert_allclose(to_numpy(bias), step(bias_value, grads[1], False), rtol=1e-5)


def test_unknown_optimizer_is_rejected():
    with pytest.raises(ValueError, match=r"Unknown optimizer 'adam'; expected one of \['adamw', 'lamb'\]"):
        create_optimizer("adam", total_steps=10, warmup_steps=0)
