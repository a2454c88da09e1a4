"""kbert.checkpoints.xlnet_converter: tiny random `transformers` XLNet models, saved
locally, imported with `kbert.from_huggingface(_task)`, compared output for output:
the content stream, the query stream under a permutation mask, a second segment
with memory, left-padded batches, the LM head and the sequence classifier."""

import keras
import numpy as np
import pytest

import kbert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4
VOCABULARY = 53
LENGTH = 7


def hf_config(**options):
    return transformers.XLNetConfig(
        vocab_size=VOCABULARY, d_model=16, n_layer=2, n_head=4, d_inner=24,
        mem_len=LENGTH, pad_token_id=5, **options,
    )


def randomized(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)  # every tensor random, LayerNorms included
    return model.eval()


def save(model, tmp_path_factory, name):
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """`(transformers XLNetLMHeadModel, its kbert XLNetPretrainer)`."""
    torch.manual_seed(0)
    hf_model = randomized(transformers.XLNetLMHeadModel(hf_config()))
    path = save(hf_model, tmp_path_factory, "xlnet_lm")
    return hf_model, kbert.from_huggingface_task(path, memory_length=LENGTH)


def left_padded(lengths=(7, 4, 6), seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(6, VOCABULARY, (len(lengths), LENGTH)).astype("int32")
    mask = np.zeros_like(ids)
    segments = np.zeros_like(ids)
    for row, real in enumerate(lengths):
        mask[row, LENGTH - real :] = 1
        segments[row, LENGTH - real // 2 :] = 1  # a second segment at the end
        segments[row, -1] = 2  # <cls>'s segment id
    ids[mask == 0] = 5
    segments[mask == 0] = 3
    return {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}


def permutation(batch=3, seed=1):
    """A random factorization order per row, its `perm_mask` and a mapping onto its last 2."""
    rng = np.random.default_rng(seed)
    blocked = np.zeros((batch, LENGTH, LENGTH), "float32")
    mapping = np.zeros((batch, 2, LENGTH), "float32")
    for row in range(batch):
        order = rng.permutation(LENGTH)
        rank = np.argsort(order)
        blocked[row] = rank[None, :] >= rank[:, None]  # j not before i: blocked (itself too)
        mapping[row, [0, 1], order[-2:]] = 1
    return blocked, mapping


def hf_inputs(x, **extra):
    inputs = dict(
        input_ids=torch.tensor(x["token_ids"], dtype=torch.long),
        token_type_ids=torch.tensor(x["segment_ids"], dtype=torch.long),
        attention_mask=torch.tensor(x["padding_mask"], dtype=torch.float32),
    )
    return {**inputs, **{key: torch.tensor(value) for key, value in extra.items()}}


def numpy(x):
    return keras.ops.convert_to_numpy(x)


def report(what, actual, expected):
    difference = float(np.abs(actual - expected).max())
    print(f"{keras.backend.backend()} xlnet {what}: max abs diff {difference:.2e}")
    assert difference <= TOLERANCE, what


def test_content_stream_matches_on_a_left_padded_batch(converted):
    hf_model, pretrainer = converted
    backbone = pretrainer.backbone
    assert isinstance(backbone, kbert.models.XLNet)
    x = left_padded()
    with torch.no_grad():
        expected = hf_model.transformer(**hf_inputs(x), use_mems=False).last_hidden_state.numpy()
    outputs = backbone(x)
    real = x["padding_mask"].astype(bool)
    report("content stream", numpy(outputs["sequence_output"])[real], expected[real])
    report("pooled (last) token", numpy(outputs["pooled_output"]), expected[:, -1])


def test_query_stream_and_lm_head_match_under_a_permutation(converted):
    hf_model, pretrainer = converted
    x = left_padded()
    blocked, mapping = permutation()
    with torch.no_grad():
        hf = hf_model(**hf_inputs(x, perm_mask=blocked, target_mapping=mapping), use_mems=False,
                      output_hidden_states=True)
    outputs = pretrainer.backbone({**x, "permutation_mask": blocked, "target_mapping": mapping})
    report("query stream", numpy(outputs["query_output"]), hf.hidden_states[-1].numpy())
    real = x["padding_mask"].astype(bool)
    report("content stream under the permutation", numpy(outputs["sequence_output"])[real],
           hf.hidden_states[-2].numpy()[real])
    logits = pretrainer({**x, "permutation_mask": blocked, "target_mapping": mapping})["plm_logits"]
    report("LM logits", numpy(logits), hf.logits.numpy())


def test_second_segment_with_memory_matches(converted):
    hf_model, pretrainer = converted
    first, second = left_padded(lengths=(7, 7, 7)), left_padded(lengths=(7, 7, 7), seed=3)
    with torch.no_grad():
        hf_first = hf_model.transformer(**hf_inputs(first), use_mems=True)
        hf_second = hf_model.transformer(**hf_inputs(second), mems=hf_first.mems, use_mems=True)
    backbone = pretrainer.backbone
    memory = backbone(first)["memory"]
    hf_memory = np.stack([m.numpy().transpose(1, 0, 2) for m in hf_first.mems], axis=1)
    report("memory", numpy(memory), hf_memory)
    outputs = backbone({**second, "memory": memory})
    report("second segment", numpy(outputs["sequence_output"]), hf_second.last_hidden_state.numpy())
    new_memory = np.stack([m.numpy().transpose(1, 0, 2) for m in hf_second.mems], axis=1)
    report("memory after the second segment", numpy(outputs["memory"]), new_memory)


def test_sequence_classifier_matches(tmp_path_factory):
    torch.manual_seed(0)
    hf_model = randomized(transformers.XLNetForSequenceClassification(hf_config(num_labels=3)))
    classifier = kbert.from_huggingface_task(save(hf_model, tmp_path_factory, "xlnet_cls"))
    assert isinstance(classifier, kbert.tasks.TextClassifier)
    x = left_padded()
    with torch.no_grad():
        expected = hf_model(**hf_inputs(x), use_mems=False).logits.numpy()
    report("classifier logits", numpy(classifier(x)), expected)


def test_token_classifier_matches(tmp_path_factory):
    torch.manual_seed(0)
    hf_model = randomized(transformers.XLNetForTokenClassification(hf_config(num_labels=4)))
    tagger = kbert.from_huggingface_task(save(hf_model, tmp_path_factory, "xlnet_tok"))
    x = left_padded()
    with torch.no_grad():
        expected = hf_model(**hf_inputs(x), use_mems=False).logits.numpy()
    real = x["padding_mask"].astype(bool)
    report("token classifier logits", numpy(tagger(x))[real], expected[real])


def test_unsupported_options_are_refused(tmp_path_factory):
    torch.manual_seed(0)
    path = save(transformers.XLNetModel(hf_config(attn_type="uni")), tmp_path_factory, "uni")
    with pytest.raises(ValueError, match="attn_type='uni'"):
        kbert.from_huggingface(path)
