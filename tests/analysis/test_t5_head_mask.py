"""T5's head masks (run_layers, with_internals): transformers 4's `head_mask`,
`decoder_head_mask` and `cross_attn_head_mask` on an imported T5.

transformers 5 dropped them; here each is a forward pre-hook on the attention's
output projection `o` of transformers' own T5 modules, scaling each head's slice
of its input, which is where transformers 4 applied them (on the probabilities,
the same by linearity).
"""

import numpy as np
import pytest
from helpers import to_numpy

import kbert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

MASKS = {
    "encoder_head_mask": np.array([[1, 0, 1], [0.5, 1, 0]], "float32"),
    "decoder_head_mask": np.array([[0, 1, 2], [1, 1, 0]], "float32"),
    "cross_attention_head_mask": np.array([[1, 0, 0], [0, 1, 1]], "float32"),
}


def scale_heads_before(projection, attention, factors):
    def hook(module, args):
        (x,) = args
        heads = x.view(*x.shape[:-1], attention.n_heads, attention.key_value_proj_dim)
        return ((heads * factors[:, None]).view(x.shape),)

    return projection.register_forward_pre_hook(hook)


@pytest.mark.slow(reason="a transformers T5 built and run beside kbert's under head masks")
def test_t5_head_masks_equal_transformers(tmp_path):
    config = transformers.T5Config(
        vocab_size=99, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_heads=3,
        relative_attention_num_buckets=8, relative_attention_max_distance=12,
        decoder_start_token_id=0, attn_implementation="eager",
    )
    torch.manual_seed(0)
    reference = transformers.T5ForConditionalGeneration(config).eval()
    reference.save_pretrained(tmp_path)
    model = kbert.from_huggingface(tmp_path)
    rng = np.random.default_rng(0)
    inputs = {"encoder_token_ids": rng.integers(2, 99, (2, 7)).astype("int32"),
              "encoder_padding_mask": np.ones((2, 7), "int32"),
              "decoder_token_ids": rng.integers(2, 99, (2, 5)).astype("int32"),
              "decoder_padding_mask": np.ones((2, 5), "int32")}
    inputs["encoder_padding_mask"][1, 4:] = 0
    handles = []
    for name, blocks, sublayer, attribute in (
        ("encoder_head_mask", reference.encoder.block, 0, "SelfAttention"),
        ("decoder_head_mask", reference.decoder.block, 0, "SelfAttention"),
        ("cross_attention_head_mask", reference.decoder.block, 1, "EncDecAttention"),
    ):
        for block, factors in zip(blocks, torch.tensor(MASKS[name])):
            attention = getattr(block.layer[sublayer], attribute)
            handles.append(scale_heads_before(attention.o, attention, factors))
    with torch.no_grad():
        expected = reference(
            input_ids=torch.tensor(inputs["encoder_token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["encoder_padding_mask"]),
            decoder_input_ids=torch.tensor(inputs["decoder_token_ids"], dtype=torch.long),
            use_cache=False,
        ).logits.numpy()
    for handle in handles:
        handle.remove()
    outputs = model.with_internals(hidden_states=False, attention_probabilities=False)(
        {**inputs, **MASKS})
    # float32 round-off only
    np.testing.assert_allclose(to_numpy(outputs["logits"]), expected, atol=1e-4, rtol=1e-4)
    plain = model.with_internals(hidden_states=False, attention_probabilities=False)(inputs)
    assert not np.allclose(to_numpy(plain["logits"]), expected, atol=1e-3)
    with pytest.raises(ValueError, match="encoder_head_mask must be"):
        model.with_internals(False, False)({**inputs, "encoder_head_mask": np.ones((3, 3))})
