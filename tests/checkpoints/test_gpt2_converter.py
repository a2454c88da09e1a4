"""kbert.checkpoints.gpt2_converter: tiny random `transformers` GPT-2 models, saved
locally, imported with `kbert.from_huggingface`, compared logit for logit
(left-padded batches included) and greedy token for token."""

import json

import keras
import numpy as np
import pytest

import kbert
from kbert.generation import CausalLMGenerator

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4
VOCABULARY = 97
END = 96


def hf_gpt2(**config):
    config = transformers.GPT2Config(
        vocab_size=VOCABULARY, n_embd=16, n_layer=2, n_head=4, n_positions=40,
        bos_token_id=END, eos_token_id=END, pad_token_id=END, **config,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)  # every tensor random, LayerNorms included
    return model.eval()


def left_padded(lengths=(9, 4, 6), length=9):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, END, (len(lengths), length)).astype("int32")
    mask = np.zeros_like(ids)
    for row, real in enumerate(lengths):
        mask[row, length - real :] = 1
    ids[mask == 0] = END
    return {"token_ids": ids, "padding_mask": mask}


def hf_inputs(x):
    mask = torch.tensor(x["padding_mask"], dtype=torch.long)
    return dict(
        input_ids=torch.tensor(x["token_ids"], dtype=torch.long),
        attention_mask=mask,
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
    )


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """`(transformers model, kbert GPT2 imported from its saved checkpoint)`."""
    hf_model = hf_gpt2()
    path = tmp_path_factory.mktemp("gpt2")
    hf_model.save_pretrained(path)
    return hf_model, kbert.from_huggingface(path)


@pytest.mark.fast_paths_both_ways
def test_logits_match_transformers_on_a_left_padded_batch(converted):
    hf_model, model = converted
    assert isinstance(model, kbert.models.GPT2) and model.end_id == END
    x = left_padded()
    with torch.no_grad():
        expected = hf_model(**hf_inputs(x), use_cache=False).logits.numpy()
    logits = keras.ops.convert_to_numpy(model.predict(x, verbose=0)["logits"])
    real = x["padding_mask"].astype(bool)
    difference = float(np.abs(logits - expected)[real].max())
    print(f"{keras.backend.backend()} gpt2: max abs logits diff {difference:.2e}")
    assert difference <= TOLERANCE


def test_sequence_output_is_the_final_hidden_state(converted):
    hf_model, model = converted
    x = left_padded()
    with torch.no_grad():
        expected = hf_model.transformer(**hf_inputs(x)).last_hidden_state.numpy()
    output = keras.ops.convert_to_numpy(model(x)["sequence_output"])
    real = x["padding_mask"].astype(bool)
    np.testing.assert_allclose(output[real], expected[real], atol=TOLERANCE)


@pytest.mark.fast_paths_both_ways
def test_greedy_matches_transformers_generate(converted):
    hf_model, model = converted
    x = left_padded()
    with torch.no_grad():
        expected = hf_model.generate(
            input_ids=torch.tensor(x["token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(x["padding_mask"], dtype=torch.long),
            max_new_tokens=12,
            do_sample=False,
            num_beams=1,
            pad_token_id=END,
        ).numpy()[:, x["token_ids"].shape[1] :]
    generated = CausalLMGenerator(model, max_new_tokens=12)(x)
    matched = int((generated[:, : expected.shape[1]] == expected).sum())
    print(f"{keras.backend.backend()} gpt2: greedy tokens matching {matched}/{expected.size}")
    np.testing.assert_array_equal(generated[:, : expected.shape[1]], expected)


def test_a_bare_gpt2_model_and_overrides_load(tmp_path):
    hf_model = hf_gpt2(n_inner=24)
    hf_model.transformer.save_pretrained(tmp_path)  # GPT2Model: no "transformer." prefix
    model = kbert.from_huggingface(tmp_path, dropout=0.0)
    assert model.dropout == 0.0 and model.intermediate_dim == 24
    x = left_padded()
    with torch.no_grad():
        expected = hf_model(**hf_inputs(x)).logits.numpy()
    real = x["padding_mask"].astype(bool)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(x)["logits"])[real], expected[real], atol=TOLERANCE
    )


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("activation_function", "relu", "activation_function"),
        ("scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx"),
        ("add_cross_attention", True, "add_cross_attention"),
    ],
)
def test_rejects_what_kbert_cannot_represent(tmp_path, option, value, message):
    hf_gpt2().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[option] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        kbert.from_huggingface(tmp_path)


def test_rejects_an_untied_head(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf_gpt2().save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    head = np.ones_like(tensors["transformer.wte.weight"])
    save_file({**tensors, "lm_head.weight": head}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="lm_head differs"):
        kbert.from_huggingface(tmp_path)
