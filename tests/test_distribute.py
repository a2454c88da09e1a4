"""kbert.distribute: strategies and distributions train like one device.

Runs that need another device count (2 logical CPUs for TensorFlow, 4 host
devices for JAX) happen in a fresh process: this file run
as a script, `python tests/test_distribute.py <run>`, which prints one
JSON line that the tests check.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from kbert import distribute
from kbert.pretraining import BertPretrainer

BACKEND = keras.backend.backend()
BATCH, LENGTH, PREDICTIONS, VOCABULARY = 8, 16, 4, 64
STEPS = 3
# Float32 sums reduced in another order (per replica, per shard) than on one device.
LOSS_TOLERANCE = 1e-5
WEIGHT_TOLERANCE = 1e-5


# ---------------------------------------------------------------------------
# Shared pieces (used by the tests and by the script runs).
# ---------------------------------------------------------------------------


def pretraining_batches(steps=STEPS):
    """`steps` global batches of MLM + NSP data. Every example has 3 real prediction
    slots of 4, so each replica's weighted mean is over as many slots as any other's
    and their average is the global mean (the per-replica loss is what Keras averages).
    """
    rng = np.random.default_rng(0)
    n = BATCH * steps
    x = {
        "token_ids": rng.integers(4, VOCABULARY, (n, LENGTH)).astype("int32"),
        "segment_ids": np.repeat([[0] * 9 + [1] * 7], n, axis=0).astype("int32"),
        "padding_mask": np.ones((n, LENGTH), "int32"),
        "mask_positions": np.stack(
            [rng.choice(np.arange(1, LENGTH), PREDICTIONS, replace=False) for _ in range(n)]
        ).astype("int32"),
    }
    y = {
        "mask_ids": rng.integers(4, VOCABULARY, (n, PREDICTIONS)).astype("int32"),
        "mask_weights": np.tile([1.0, 1.0, 1.0, 0.0], (n, 1)).astype("float32"),
        "pair_labels": rng.integers(0, 2, (n,)).astype("int32"),
    }
    return x, y


def tiny_pretrainer(jit_compile, weights=None, dropout=0.0):
    """BERT pretrainer (MLM + NSP) on a 1-layer bert_tiny, compiled with SGD.

    `weights` (NumPy, from `get_weights`) replace the random initial ones.
    SGD's update is linear in the gradient, so weights compare to float
    noise; Adam's `m/√v` would turn float-noise gradients (rows no example
    uses) into whole steps.
    """
    backbone = kbert.models.bert_tiny(
        vocabulary_size=VOCABULARY,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        max_positions=LENGTH,
        dropout=dropout,
    )
    model = BertPretrainer(backbone, pair_objective="nsp", name="pretrainer")
    if weights is not None:
        model.set_weights(weights)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), jit_compile=jit_compile)
    return model


class StepLosses(keras.callbacks.Callback):
    """The running mean loss that `fit` reports after each step."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def fit_losses(model, data):
    """Fit one pass over `data` (NumPy `(x, y)` or a dataset); the per-step losses."""
    record = StepLosses()
    if isinstance(data, tuple):
        model.fit(*data, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[record])
    else:
        model.fit(data, epochs=1, verbose=0, callbacks=[record])
    return record.losses


def max_weight_difference(model, reference):
    return max(float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), reference))


def run_script(run, xla_flags=None):
    """Run this file as a script in a fresh process; the JSON it prints."""
    env = dict(os.environ, KERAS_BACKEND=BACKEND)
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    args = [sys.executable, __file__, run]
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------
# Script runs (each in a fresh process).
# ---------------------------------------------------------------------------


def tensorflow_mirrored():
    """One device (XLA, inside a strategy scope) vs MirroredStrategy over 2 logical CPUs."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    x, y = pretraining_batches()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True)
    static = all(spec.shape.is_fully_defined() for spec in tf.nest.flatten(dataset.element_spec))

    one_device = tf.distribute.OneDeviceStrategy("/cpu:0")
    with one_device.scope():
        reference = tiny_pretrainer(jit_compile=distribute.jit_compile_for(one_device))
    initial_weights = reference.get_weights()
    reference_losses = fit_losses(reference, dataset)
    reference_weights = reference.get_weights()

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with mirrored.scope():
        model = tiny_pretrainer(distribute.jit_compile_for(mirrored), initial_weights)
    losses = fit_losses(model, dataset)
    return {
        "static_shapes": static,
        "default_strategy": type(distribute.default_strategy()).__name__,
        "jit_compile": [reference.jit_compile, model.jit_compile],
        "replicas": mirrored.num_replicas_in_sync,
        "reference_losses": reference_losses,
        "losses": losses,
        "max_weight_difference": max_weight_difference(model, reference_weights),
    }


def jax_distributions():
    """One device vs DataParallel over 4 host devices vs ModelParallel over a 2x2 mesh."""
    data = pretraining_batches()
    reference = tiny_pretrainer(jit_compile=True)
    initial_weights = reference.get_weights()
    reference_losses = fit_losses(reference, data)
    reference_weights = reference.get_weights()
    results = {"devices": keras.distribution.list_devices(), "reference_losses": reference_losses}

    for name, distribution in (
        ("data_parallel", distribute.get_distribution()),
        ("model_parallel", distribute.get_distribution(model_parallel=2, model="bert_tiny")),
    ):
        with distribution.scope():
            model = tiny_pretrainer(jit_compile=True, weights=initial_weights)
            losses = fit_losses(model, data)
        results[name] = {
            "type": type(distribution).__name__,
            "mesh": list(distribution.device_mesh.shape),
            "losses": losses,
            "max_weight_difference": max_weight_difference(model, reference_weights),
            # After training: the optimizer step kept each variable's layout.
            "shardings": {
                v.path: {
                    "spec": [None if a is None else str(a) for a in v.value.sharding.spec],
                    "shard_shape": list(v.value.addressable_shards[0].data.shape),
                }
                for v in model.weights
            },
        }
    return results


OBJECTIVE_LENGTH = 32


def objective_models(tokenizer):
    """`name: (model, pipeline)` for every pretraining objective; `pipeline(batch)` gives the data."""
    from kbert.pretraining import (
        DistillationTrainer,
        ElectraPretrainer,
        SpanBertPretrainer,
        SpanCorruption,
        pretraining_dataset,
    )
    from kbert.tasks import Seq2SeqLM

    tiny = dict(vocabulary_size=tokenizer.vocabulary_size, num_layers=1, hidden_dim=16,
                num_heads=2, intermediate_dim=32, max_positions=OBJECTIVE_LENGTH, dropout=0.1)
    lines = [f"w{i} w{(i * 7) % 23} w{(i * 5) % 31}. w{i % 11} long{i % 13}word." for i in range(120)]
    documents = ["\n".join(lines[i : i + 6]) for i in range(0, len(lines), 6)]

    def text_data(objective):
        return lambda batch: pretraining_dataset(
            documents, tokenizer, objective, sequence_length=OBJECTIVE_LENGTH,
            batch_size=batch, shuffle_buffer=16, seed=0,
        )

    def span_corruption_data(batch):
        stream = [i for ids in tokenizer(lines) for i in ids + [1]]
        return SpanCorruption(24, tokenizer.vocabulary_size).dataset(stream, batch).repeat()

    bigbird = kbert.models.Encoder(  # 8 blocks of 4 (> (5 + 2)·4): the block-sparse path
        **tiny, attention="bigbird", attention_kwargs={"block_size": 4, "num_random_blocks": 1}
    )
    albert = kbert.models.albert_base(**tiny, embedding_dim=8)
    roberta = kbert.models.roberta_base(**{**tiny, "max_positions": OBJECTIVE_LENGTH + 2})
    electra = kbert.models.electra_small(**tiny, embedding_dim=16)
    generator = dict(generator_num_layers=1, generator_hidden_dim=8, generator_num_heads=2,
                     generator_intermediate_dim=16)
    teacher = BertPretrainer(kbert.models.bert_tiny(**{**tiny, "num_layers": 2}), pair_objective=None)
    student = BertPretrainer(kbert.models.bert_tiny(**tiny), pair_objective=None)
    t5 = kbert.models.t5_v1_1_small(vocabulary_size=tokenizer.vocabulary_size, num_layers=1,
                                    hidden_dim=16, num_heads=2, key_dim=8, intermediate_dim=32)
    return {
        "albert_sop": (BertPretrainer(albert, pair_objective="sop"), text_data("sop")),
        "roberta_mlm": (BertPretrainer(roberta, pair_objective=None), text_data("mlm")),
        "bigbird_mlm": (BertPretrainer(bigbird, pair_objective=None), text_data("mlm")),
        "spanbert": (SpanBertPretrainer(kbert.models.bert_tiny(**tiny)), text_data("span")),
        "electra": (ElectraPretrainer(electra, **generator), text_data("electra")),
        "distillation": (DistillationTrainer(student, teacher), text_data("mlm")),
        "t5_span_corruption": (Seq2SeqLM(t5), span_corruption_data),
    }


def tensorflow_xla_objectives():
    """Every pretraining objective fits with XLA inside a strategy scope, from kbert's pipelines."""
    import tensorflow as tf

    from kbert.text import WordPieceTokenizer, learn_word_piece_vocabulary

    texts = [f"w{i} long{i % 13}word." for i in range(40)]
    tokenizer = WordPieceTokenizer(learn_word_piece_vocabulary(texts, 120))
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")  # the TPUStrategy code path, one device
    results = {}
    with strategy.scope():
        for name, (model, pipeline) in objective_models(tokenizer).items():
            dataset = pipeline(4)
            model.compile(optimizer=keras.optimizers.Adam(1e-3),
                          jit_compile=distribute.jit_compile_for(strategy))
            before = [np.array(w) for w in model.trainable_weights]
            history = model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)
            results[name] = {
                "static_shapes": all(
                    spec.shape.is_fully_defined() for spec in tf.nest.flatten(dataset.element_spec)
                ),
                "jit_compile": model.jit_compile,
                "loss": history.history["loss"][-1],
                "trained": any(
                    not np.array_equal(old, np.array(w))
                    for old, w in zip(before, model.trainable_weights)
                ),
            }
    return results


RUNS = {
    "tensorflow_mirrored": tensorflow_mirrored,
    "tensorflow_xla_objectives": tensorflow_xla_objectives,
    "jax_distributions": jax_distributions,
}


# ---------------------------------------------------------------------------
# Tests.
# ---------------------------------------------------------------------------


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.distribute needs the TensorFlow backend")
@pytest.mark.slow(reason="a tf.distribute strategy over two logical devices against one device")
def test_mirrored_strategy_loss_equals_one_device():
    result = run_script("tensorflow_mirrored")
    assert result["static_shapes"]
    assert result["default_strategy"] == "_DefaultDistributionStrategy"  # no TPU, no GPUs here
    # XLA on one device (as on a TPU); Keras 3 cannot XLA-compile a multi-device Mirrored step.
    assert result["jit_compile"] == [True, False]
    assert result["replicas"] == 2
    assert len(result["losses"]) == STEPS
    np.testing.assert_allclose(
        result["losses"], result["reference_losses"], rtol=LOSS_TOLERANCE, atol=LOSS_TOLERANCE
    )
    assert result["max_weight_difference"] < WEIGHT_TOLERANCE


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.distribute needs the TensorFlow backend")
@pytest.mark.slow(reason="every objective's step compiled by XLA in a strategy")
def test_every_objective_fits_with_xla_in_a_strategy_scope():
    """The TPU recipe (static-shape pipeline, strategy scope, jit_compile=True) for each objective."""
    results = run_script("tensorflow_xla_objectives")
    assert sorted(results) == sorted(
        ["albert_sop", "roberta_mlm", "bigbird_mlm", "spanbert", "electra", "distillation",
         "t5_span_corruption"]
    )
    for name, result in results.items():
        assert result["static_shapes"], name
        assert result["jit_compile"] is True, name
        assert np.isfinite(result["loss"]) and result["loss"] > 0, name
        assert result["trained"], name


# Megatron layout of a bert_tiny-shaped pretrainer (hidden 16, FFN 32) over a model axis of 2.
EXPECTED_SHARDING = {
    "embeddings/token_embedding/embeddings": ([None, "model"], [VOCABULARY, 8]),
    "transformer_layer_0/attention_layer/query_dense/kernel": ([None, "model"], [16, 8]),
    "transformer_layer_0/attention_layer/key_dense/bias": (["model"], [8]),
    "transformer_layer_0/attention_layer/output_dense/kernel": (["model", None], [8, 16]),
    "transformer_layer_0/intermediate_dense/kernel": ([None, "model"], [16, 16]),
    "transformer_layer_0/output_dense/kernel": (["model", None], [16, 16]),
    "transformer_layer_0/output_dense/bias": ([None], [16]),
    "embeddings/layer_norm/gamma": ([None], [16]),
    "pretrainer/mlm_head/transform/kernel": ([None, None], [16, 16]),
}


@pytest.mark.skipif(BACKEND != "jax", reason="keras.distribution runs on the JAX backend")
@pytest.mark.slow(reason="a sharded JAX training step over two devices against one device")
def test_jax_data_and_model_parallel_loss_equals_one_device():
    result = run_script("jax_distributions", xla_flags="--xla_force_host_platform_device_count=4")
    assert len(result["devices"]) == 4
    reference = result["reference_losses"]
    assert len(reference) == STEPS
    for name, kind, mesh in (
        ("data_parallel", "DataParallel", [4]),
        ("model_parallel", "ModelParallel", [2, 2]),
    ):
        run = result[name]
        assert run["type"] == kind and run["mesh"] == mesh
        np.testing.assert_allclose(
            run["losses"], reference, rtol=LOSS_TOLERANCE, atol=LOSS_TOLERANCE, err_msg=name
        )
        assert run["max_weight_difference"] < WEIGHT_TOLERANCE, name
    data_parallel = result["data_parallel"]["shardings"]
    assert all(s["spec"] == [None] * len(s["spec"]) for s in data_parallel.values())
    model_parallel = result["model_parallel"]["shardings"]
    for path, (spec, shard_shape) in EXPECTED_SHARDING.items():
        assert model_parallel[path] == {"spec": spec, "shard_shape": shard_shape}, path


def test_layout_map_rules_cover_encoders_and_t5():
    mesh = distribute.device_mesh(1, devices=["cpu:0"])
    layout = distribute.layout_map("t5_v1_1_small", mesh)
    expected = {
        "encoder_layer_0/self_attention/query_dense/kernel": (None, "model"),
        "decoder_layer_3/cross_attention/output_dense/kernel": ("model", None),
        "decoder_layer_0/gate_dense/kernel": (None, "model"),
        "encoder_layer_1/output_dense/kernel": ("model", None),
        "token_embedding/embeddings": (None, "model"),
        "lm_head/kernel": ("model", None),
        "transformer_layer_0/attention_layer/key_global_dense/kernel": (None, "model"),  # Longformer
        "shared_transformer_layer/intermediate_dense/bias": ("model",),  # ALBERT
    }
    for path, axes in expected.items():
        assert tuple(layout[path].axes) == axes, path
    for replicated in ("encoder_final_layer_norm/scale", "pooler/dense/kernel"):
        assert layout[replicated] is None


def test_layout_map_splits_over_the_axis_it_is_given():
    mesh = keras.distribution.DeviceMesh((1, 1), ["data", "tensor"], ["cpu:0"])
    layout = distribute.layout_map("bert_tiny", mesh, model_axis="tensor")
    assert tuple(layout["transformer_layer_0/attention_layer/query_dense/kernel"].axes) == (None, "tensor")
    assert tuple(layout["transformer_layer_1/output_dense/kernel"].axes) == ("tensor", None)
    assert tuple(layout["transformer_layer_0/intermediate_dense/bias"].axes) == ("tensor",)


def test_layout_map_rejects_bad_input():
    mesh = keras.distribution.DeviceMesh((1, 3), ["batch", "model"], ["cpu:0"] * 3)
    with pytest.raises(ValueError, match="not divisible: 128, 512, 2 heads"):
        distribute.layout_map("bert_tiny", mesh)
    with pytest.raises(ValueError, match="Unknown model 'bert_tiniest'"):
        distribute.layout_map("bert_tiniest", mesh)
    with pytest.raises(ValueError, match="has axes"):
        distribute.layout_map("bert_tiny", mesh, model_axis="tensor")
    # A built model is checked by its variables' shapes (here a feed-forward kernel of width 4).
    ffn = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="intermediate_dense")])
    with pytest.raises(ValueError, match=r"intermediate_dense/kernel \(3, 4\)"):
        distribute.layout_map(ffn, mesh)
    with pytest.raises(ValueError, match="No variable"):
        distribute.layout_map(keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)]), mesh)
    with pytest.raises(ValueError, match="positive divisor of the 1 devices"):
        distribute.device_mesh(2, devices=["cpu:0"])


@pytest.mark.skipif(BACKEND == "jax", reason="checks the error raised off the JAX backend")
def test_get_distribution_needs_jax():
    with pytest.raises(ValueError, match="needs KERAS_BACKEND=jax"):
        distribute.get_distribution()


@pytest.mark.skipif(BACKEND == "tensorflow", reason="checks the error raised off TensorFlow")
def test_default_strategy_needs_tensorflow():
    with pytest.raises(ValueError, match="needs KERAS_BACKEND=tensorflow"):
        distribute.default_strategy()


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_pretrainer_trains_under_mixed_precision(policy):
    keras.config.set_dtype_policy(policy)  # conftest restores float32
    # bfloat16 compiled by XLA as on a TPU; float16 as on a GPU (XLA is optional there,
    # and skipping it keeps this test fast). PyTorch runs eagerly.
    jit_compile = BACKEND == "jax" or (BACKEND == "tensorflow" and policy == "mixed_bfloat16")
    # XLA on CPU has no float16 x float16 -> float32 dot, which JAX's fused attention
    # kernel uses; with attention dropout (as in BERT pretraining) the layer takes its
    # explicit path. On a GPU the fused kernel runs in float16.
    dropout = 0.1 if BACKEND == "jax" and policy == "mixed_float16" else 0.0
    model = tiny_pretrainer(jit_compile, dropout=dropout)
    initial_weights = model.get_weights()
    assert model.compute_dtype == keras.dtype_policies.get(policy).compute_dtype
    losses = fit_losses(model, pretraining_batches(steps=2))
    assert np.all(np.isfinite(losses)), losses
    # Near-zero initial logits: the first loss is about log(V) (MLM) + log(2) (NSP) = 4.85.
    assert abs(losses[0] - np.log(VOCABULARY) - np.log(2)) < 0.1, losses
    if policy == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.trainable_weights
    for variable, old in zip(model.weights, initial_weights):
        if not variable.trainable:
            continue
        value = keras.ops.convert_to_numpy(variable)
        assert value.dtype == np.float32 and np.all(np.isfinite(value)), variable.path
        assert not np.array_equal(value, old), f"{variable.path} did not train"


if __name__ == "__main__":
    print(json.dumps(RUNS[sys.argv[1]]()))
