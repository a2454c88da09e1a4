"""Every family and task that exports answers as `kbert predict` does, in both formats, in this process.

A classifier of each tokenizer kind and layout (BERT's WordPiece, RoBERTa's byte-level BPE, XLNet's
SentencePiece with its last `<cls>` and left padding; sentence pairs for each), a BigBird and a Longformer
classifier (sparse attention, planned at its length), a BERT and an XLNet tagger: the
SavedModel (made and run on TensorFlow) and ONNX (made on PyTorch, run in onnxruntime on int64 ids in the
model's own layout, which its metadata states) give `kbert predict`'s probabilities to 1e-5, and carry the
label names. (The BERT tagger's SavedModel: tests/jobs/test_export_run.py.)
"""

import json

import keras
import numpy as np
import pytest
from finetuning_data import VOCABULARY, write_vocabulary, write_xlnet_checkpoint

import kbert
from kbert.jobs.export_run import export_onnx, export_saved_model
from kbert.jobs.predict_run import predict_batch
from kbert.tasks import TextClassifier, TokenClassifier

pytest.importorskip("tensorflow_text")

from kbert.text import (BytePairTokenizer, SentencePieceTokenizer, TextPreprocessor,  # noqa: E402
                        WordPieceTokenizer, learn_byte_pair_vocabulary)
from kbert.text.last_token_layout import layout_for  # noqa: E402

BACKEND = keras.backend.backend()
TEXTS = ["bob is in paris.", "the good film", "where is alice?"]
PAIRS = ["alice is in france.", "a bad film", "bob is here."]
LABELS = ["no", "maybe", "yes"]
TAGS = ["O", "B-PER", "I-PER"]
SIZES = dict(num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32, dropout=0.0)


# Sparse attention at 16 tokens: BigBird's random blocks (past its 14 tokens of full attention), Longformer's
# window and its global first token.
SPARSE = {"bigbird": {"attention_kwargs": {"block_size": 2, "num_random_blocks": 1}},
          "longformer": {"attention_kwargs": {"window": 4}}}


def _tokenizer(kind, folder):
    if kind in ("bert", "albert", "electra", "distilbert", "bigbird", "longformer"):
        write_vocabulary(folder)
        return WordPieceTokenizer(str(folder / "vocab.txt"))
    if kind == "roberta":
        learn_byte_pair_vocabulary(TEXTS * 20 + PAIRS * 20, 300, str(folder))
        return BytePairTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    write_xlnet_checkpoint(folder)
    return SentencePieceTokenizer(str(folder / "spiece.model"))


def _model(name, folder):
    """A tiny `name` model (`<family>_classifier` or `bert_tagger`) with its preprocessor."""
    family, task = name.split("_")
    tokenizer = _tokenizer(family, folder)
    size = max(len(VOCABULARY), tokenizer.vocabulary_size)
    if family == "xlnet":
        backbone = kbert.models.build("xlnet_tiny", vocabulary_size=size, **SIZES)
    else:
        preset = {"bert": "bert_tiny", "roberta": "roberta_base", "albert": "albert_base",
                  "electra": "electra_small", "distilbert": "distilbert_base", "bigbird": "bigbird_base",
                  "longformer": "longformer_base"}[family]
        backbone = kbert.models.build(preset, vocabulary_size=size, max_positions=24, **SPARSE.get(family, {}),
                                      **SIZES)
    if task == "tagger":
        return TokenClassifier(backbone, len(TAGS), preprocessor=TextPreprocessor(tokenizer, 16, labels=TAGS))
    return TextClassifier(backbone, len(LABELS), preprocessor=TextPreprocessor(tokenizer, 16, labels=LABELS))


def _expected(model, pairs):
    """`kbert predict`'s probabilities for a classifier; the logits it reads for a tagger (in its layout)."""
    if isinstance(model, TextClassifier):
        results = predict_batch(model, [{"text": text, "text_pair": pair}
                                        for text, pair in zip(TEXTS, pairs or [None] * len(TEXTS))])
        return np.array([[result["scores"][label] for label in LABELS] for result in results])
    inputs = layout_for(model.backbone, model.preprocessor.encode(TEXTS))
    return keras.ops.convert_to_numpy(model.predict(inputs, verbose=0))


def _probabilities(model, logits):
    if not isinstance(model, TextClassifier):
        return np.asarray(logits)
    logits = np.asarray(logits, np.float64)
    exponentials = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exponentials / exponentials.sum(axis=-1, keepdims=True)


NAMES = [*(f"{family}_classifier" for family in ("bert", "roberta", "albert", "electra", "distilbert", "xlnet",
                                                 "bigbird", "longformer")), "bert_tagger", "xlnet_tagger"]
# A BERT tagger's SavedModel is tests/jobs/test_export_run.py's, read in a process without kbert.
SAVED_MODEL_NAMES = [name for name in NAMES if name != "bert_tagger"]


@pytest.mark.skipif(BACKEND != "tensorflow", reason="the SavedModel is made on TensorFlow")
@pytest.mark.parametrize("name", SAVED_MODEL_NAMES)
@pytest.mark.slow(reason="exports a SavedModel (TensorFlow traces every bucket's branch) and loads it")
def test_the_saved_model_answers_as_predict(name, tmp_path):
    import tensorflow as tf

    model = _model(name, tmp_path)
    export_saved_model(model, str(tmp_path / "served"))
    served = tf.saved_model.load(str(tmp_path / "served"))
    names = [label.decode() for label in served.labels()["labels"].numpy()]
    assert names == (LABELS if isinstance(model, TextClassifier) else TAGS)
    logits = served.serve(tf.constant(TEXTS))["logits"].numpy()
    np.testing.assert_allclose(_probabilities(model, logits), _expected(model, None), atol=1e-5)
    if isinstance(model, TextClassifier):
        logits = served.serve_pairs(tf.constant(TEXTS), tf.constant(PAIRS))["logits"].numpy()
        np.testing.assert_allclose(_probabilities(model, logits), _expected(model, PAIRS), atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="ONNX is made on PyTorch")
@pytest.mark.parametrize("name", [name for name in NAMES if name.split("_")[0] not in SPARSE])
def test_the_onnx_model_answers_as_predict_on_int64_ids_in_its_layout(name, tmp_path):
    onnx = pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    model = _model(name, tmp_path)
    export_onnx(model, str(tmp_path / "onnx"))
    path = str(tmp_path / "onnx" / "model.onnx")
    metadata = {prop.key: prop.value for prop in onnx.load(path).metadata_props}
    assert json.loads(metadata["labels"]) == (LABELS if isinstance(model, TextClassifier) else TAGS)
    assert metadata["layout"].startswith("XLNet: A <sep> B <sep> <cls>, padded on the left" if name.startswith(
        "xlnet") else "BERT: [CLS] A [SEP] B [SEP], padded on the right")
    session = onnxruntime.InferenceSession(path)
    assert [output.name for output in session.get_outputs()] == ["logits"]
    cases = [None, PAIRS] if isinstance(model, TextClassifier) else [None]
    for pairs in cases:
        inputs = layout_for(model.backbone, model.preprocessor.encode(TEXTS, pairs))
        feed = {i.name: np.asarray(inputs[i.name], np.int64) for i in session.get_inputs()}
        (logits,) = session.run(["logits"], feed)
        np.testing.assert_allclose(_probabilities(model, logits), _expected(model, pairs), atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="ONNX is made on PyTorch")
@pytest.mark.parametrize("family", sorted(SPARSE))
def test_onnx_refuses_sparse_attention_naming_the_saved_model(family, tmp_path):
    model = _model(f"{family}_classifier", tmp_path)
    with pytest.raises(ValueError, match=f"^--format onnx cannot write {family} attention .*--format saved_model"):
        export_onnx(model, str(tmp_path / "onnx"))
