"""kbert.checkpoints.long_document_converter: `big_bird` and `longformer`
checkpoints of tiny random `transformers` models, saved locally, imported, and
compared output for output.

BigBird in block-sparse mode draws its random blocks per call in training and
uses block 0 at inference, which no fixed plan can match; there kbert is
compared with a NumPy forward pass over the checkpoint's tensors, with full
attention restricted to the layer's pattern (built here from the plan and the
ITC table); the same NumPy pass with a full pattern checks the
`original_full` import. Where the reference itself falls back to full
attention, kbert is compared with the reference directly.
"""

import json
import shutil

import keras
import numpy as np
import pytest
from helpers import np_gelu_tanh, np_itc_pattern, np_layer_norm, np_softmax

import kbert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# float32 on both sides; round-off only, so 1e-4 leaves a wide margin.
TOLERANCE = 1e-4
BLOCK, RANDOM = 4, 1  # the reference takes full attention up to (5 + 2)·4 = 28 tokens

_SIZES = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=128,
)


def _randomize(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    return model.eval()


def _big_bird(**config):
    keywords = dict(_SIZES, block_size=BLOCK, num_random_blocks=RANDOM, **config)
    return _randomize(transformers.BigBirdModel(transformers.BigBirdConfig(**keywords)))


def _longformer(**config):
    keywords = dict(_SIZES, type_vocab_size=1, layer_norm_eps=1e-5, attention_window=[4, 6])
    keywords.update(config)
    return _randomize(transformers.LongformerModel(transformers.LongformerConfig(**keywords)))


def _saved(hf_model, tmp_path_factory, name):
    path = tmp_path_factory.mktemp(name)
    hf_model.save_pretrained(path)
    return path


# One saved checkpoint and one import per family for the whole module (the
# tests only read them); the unsupported-option tests edit a copy.
@pytest.fixture(scope="module")
def big_bird(tmp_path_factory):
    hf_model = _big_bird()
    path = _saved(hf_model, tmp_path_factory, "big_bird")
    return hf_model, path, kbert.from_huggingface(path)


@pytest.fixture(scope="module")
def longformer(tmp_path_factory):
    hf_model = _longformer()
    path = _saved(hf_model, tmp_path_factory, "longformer")
    return hf_model, path, kbert.from_huggingface(path)


def _inputs(length, real, pad_id, seed=0):
    """Two sequences: full, and right-padded after `real` tokens."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(3, 99, size=(2, length)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[1, real:] = 0
    token_ids[padding_mask == 0] = pad_id
    segment_ids = np.zeros_like(token_ids)
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def _reference(hf_model, inputs, **extra):
    hf_inputs = {
        "input_ids": torch.tensor(inputs["token_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(inputs["padding_mask"], dtype=torch.long),
        "token_type_ids": torch.tensor(inputs["segment_ids"], dtype=torch.long),
    }
    hf_inputs.update({k: torch.tensor(v, dtype=torch.long) for k, v in extra.items()})
    with torch.no_grad():
        outputs = hf_model(**hf_inputs)
    return outputs.last_hidden_state.numpy(), outputs.pooler_output.numpy()


def _max_diffs(backbone, inputs, expected_sequence, expected_pooled):
    """Max abs differences over real positions, and of the pooled output."""
    outputs = backbone(inputs, training=False)
    sequence = keras.ops.convert_to_numpy(outputs["sequence_output"])
    pooled = keras.ops.convert_to_numpy(outputs["pooled_output"])
    real = inputs["padding_mask"].astype(bool)
    return (
        float(np.abs(sequence[real] - expected_sequence[real]).max()),
        float(np.abs(pooled - expected_pooled).max()),
    )


def test_big_bird_matches_transformers_where_it_runs_full_attention(big_bird):
    hf_model, _, backbone = big_bird
    assert backbone.attention == "bigbird"
    assert backbone.attention_kwargs[1] == {"block_size": BLOCK, "num_random_blocks": RANDOM, "seed": 1}
    inputs = _inputs(28, real=24, pad_id=0)  # (5 + 2r)·b tokens: the longest full-attention length
    diffs = _max_diffs(backbone, inputs, *_reference(hf_model, inputs))
    print(f"{keras.backend.backend()} big_bird n=28: max abs diff {diffs}")
    assert max(diffs) <= TOLERANCE


def _np_big_bird(tensors, inputs, patterns, heads):
    """BigBird encoder forward in NumPy: BERT post-LN blocks, tanh GELU, per-layer patterns."""
    t = {name: value.astype(np.float64) for name, value in tensors.items()}

    def linear(x, name):
        return x @ t[name + ".weight"].T + t[name + ".bias"]

    def norm(x, name):
        return np_layer_norm(x, t[name + ".weight"], t[name + ".bias"], 1e-12)

    ids, segments, real = inputs["token_ids"], inputs["segment_ids"], inputs["padding_mask"]
    batch, n = ids.shape
    x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.token_type_embeddings.weight"][segments]
    x = norm(x + t["embeddings.position_embeddings.weight"][np.arange(n)], "embeddings.LayerNorm")
    for index, pattern in enumerate(patterns):
        prefix = f"encoder.layer.{index}."

        def split(y):
            return y.reshape(batch, n, heads, -1)

        q = split(linear(x, prefix + "attention.self.query"))
        k = split(linear(x, prefix + "attention.self.key"))
        v = split(linear(x, prefix + "attention.self.value"))
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
        mask = pattern[None] & real.astype(bool)[:, None, None, :]
        context = np.einsum("bhqk,bkhd->bqhd", np_softmax(np.where(mask, scores, -np.inf)), v)
        attention = linear(context.reshape(batch, n, -1), prefix + "attention.output.dense")
        x = norm(x + attention, prefix + "attention.output.LayerNorm")
        hidden = np_gelu_tanh(linear(x, prefix + "intermediate.dense"))
        x = norm(x + linear(hidden, prefix + "output.dense"), prefix + "output.LayerNorm")
    return x, np.tanh(linear(x[:, 0], "pooler"))


def test_big_bird_block_sparse_equals_numpy_full_attention_with_its_pattern(big_bird):
    hf_model, _, backbone = big_bird
    tensors = {name: p.detach().numpy() for name, p in hf_model.state_dict().items()}
    length = 61  # padded to 64 inside each layer
    patterns = []
    for layer in backbone.transformer_layers:
        attention = layer.attention_layer
        patterns.append(np_itc_pattern(attention.random_plan(length), length, BLOCK))
    # Layers are seeded with their index (as the reference): their plans differ.
    assert not np.array_equal(patterns[0], patterns[1])
    inputs = _inputs(length, real=length - 9, pad_id=0)
    expected = _np_big_bird(tensors, inputs, patterns, heads=4)
    diffs = _max_diffs(backbone, inputs, *expected)
    print(f"{keras.backend.backend()} big_bird block-sparse n={length}: max abs diff {diffs}")
    assert max(diffs) <= TOLERANCE


def test_big_bird_original_full(big_bird, tmp_path):
    hf_model, path, _ = big_bird
    shutil.copytree(path, tmp_path, dirs_exist_ok=True)
    config_file = tmp_path / "config.json"
    config_file.write_text(
        json.dumps({**json.loads(config_file.read_text()), "attention_type": "original_full"})
    )
    backbone = kbert.from_huggingface(tmp_path)
    assert backbone.attention == "dense"
    tensors = {name: p.detach().numpy() for name, p in hf_model.state_dict().items()}
    inputs = _inputs(40, real=33, pad_id=0)
    full = [np.ones((40, 40), bool)] * len(backbone.transformer_layers)
    assert max(_max_diffs(backbone, inputs, *_np_big_bird(tensors, inputs, full, heads=4))) <= TOLERANCE


@pytest.mark.parametrize("with_global", [False, True])
def test_longformer_matches_transformers(with_global, longformer):
    hf_model, _, backbone = longformer
    assert backbone.attention == "longformer"
    assert backbone.attention_kwargs == [{"window": 2}, {"window": 3}]
    assert backbone.position_offset == 2 and backbone.num_segments == 1
    inputs = _inputs(19, real=13, pad_id=1)
    extra = {}
    if with_global:
        global_mask = np.zeros_like(inputs["token_ids"])
        global_mask[:, 0] = 1  # CLS, as for classification
        global_mask[0, [5, 17]] = 1
        global_mask[1, 9] = 1
        inputs["global_attention_mask"] = extra["global_attention_mask"] = global_mask
    diffs = _max_diffs(backbone, inputs, *_reference(hf_model, inputs, **extra))
    print(f"{keras.backend.backend()} longformer global={with_global}: max abs diff {diffs}")
    assert max(diffs) <= TOLERANCE


def test_longformer_masked_lm_checkpoint_and_one_window(tmp_path):
    config = transformers.LongformerConfig(
        **dict(_SIZES, type_vocab_size=1, layer_norm_eps=1e-5, attention_window=6)
    )
    hf_model = _randomize(transformers.LongformerForMaskedLM(config))
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.from_huggingface(tmp_path)
    assert backbone.attention_kwargs == {"window": 3} and not backbone.use_pooler
    inputs = _inputs(19, real=13, pad_id=1)
    outputs = backbone(inputs)
    with torch.no_grad():
        expected = hf_model.longformer(
            input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long),
        ).last_hidden_state.numpy()
    real = inputs["padding_mask"].astype(bool)
    sequence = keras.ops.convert_to_numpy(outputs["sequence_output"])
    assert np.abs(sequence[real] - expected[real]).max() <= TOLERANCE


@pytest.mark.parametrize(
    "family, option, message",
    [
        ("big_bird", dict(rescale_embeddings=True), "rescale_embeddings=True"),
        ("big_bird", dict(use_bias=False), "use_bias=False"),
        ("big_bird", dict(attention_type="simulated_sparse"), "simulated_sparse"),
        ("longformer", dict(attention_window=[4]), "one per layer"),
        ("longformer", dict(attention_window=5), "positive even number"),
    ],
)
def test_unsupported_config_options(family, option, message, request, tmp_path):
    _, path, _ = request.getfixturevalue(family)
    shutil.copytree(path, tmp_path, dirs_exist_ok=True)
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **option}))
    with pytest.raises(ValueError, match=message):
        kbert.from_huggingface(tmp_path)
