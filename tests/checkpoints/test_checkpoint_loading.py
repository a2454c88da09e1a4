"""`load_checkpoint`: every kind of `--checkpoint` to a backbone and its tokenizer, and the bad ones."""

import json

import keras
import numpy as np
import pytest
from finetuning_data import VOCABULARY, write_t5_checkpoint, write_vocabulary

import kbert
from kbert.pretraining import BertPretrainer
from kbert.tasks import Seq2SeqLM
from kbert.checkpoints.checkpoint_loading import load_checkpoint
from kbert.text import SentencePieceTokenizer

TINY = dict(num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32, max_positions=32, dropout=0.0)


def _tiny_encoder(vocabulary_size=None):
    return kbert.models.build("bert_tiny", vocabulary_size=vocabulary_size or len(VOCABULARY), **TINY)


def _token_table(backbone):
    return keras.ops.convert_to_numpy(backbone.embeddings.token_embedding.embeddings)


def _ids(tokenizer, text):
    return tokenizer.tokenize(text).numpy().tolist()


def _hugging_face_folder(folder, lowercase):
    import transformers

    config = transformers.BertConfig(vocab_size=len(VOCABULARY), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    model = transformers.BertModel(config)
    model.save_pretrained(folder)
    with open(folder / "tokenizer_config.json", "w") as f:
        json.dump({"do_lower_case": lowercase}, f)
    return model


@pytest.mark.parametrize("lowercase", [True, False])
def test_a_hugging_face_folder(lowercase, tmp_path):
    model = _hugging_face_folder(tmp_path, lowercase)
    write_vocabulary(tmp_path)
    backbone, tokenizer = load_checkpoint(tmp_path)
    assert isinstance(backbone, kbert.models.Encoder) and backbone.num_layers == 1
    np.testing.assert_array_equal(_token_table(backbone), model.embeddings.word_embeddings.weight.detach().numpy())
    unknown, bob = VOCABULARY.index("[UNK]"), VOCABULARY.index("bob")
    assert _ids(tokenizer, "Bob bob") == [bob if lowercase else unknown, bob]  # tokenizer_config.json's case


def test_a_pretrainers_model_keras_with_its_vocabulary_beside(tmp_path):
    encoder = _tiny_encoder()
    BertPretrainer(encoder).save(tmp_path / "model.keras")
    write_vocabulary(tmp_path)
    backbone, tokenizer = load_checkpoint(tmp_path / "model.keras")
    assert isinstance(backbone, kbert.models.Encoder)
    np.testing.assert_array_equal(_token_table(backbone), _token_table(encoder))
    assert tokenizer.vocabulary_size == len(VOCABULARY)


def test_a_builder_name_with_a_vocabulary_is_sized_to_it(tmp_path):
    backbone, tokenizer = load_checkpoint("bert_tiny", vocabulary=write_vocabulary(tmp_path))
    assert (backbone.vocabulary_size, backbone.num_layers, backbone.hidden_dim) == (len(VOCABULARY), 2, 128)
    assert _ids(tokenizer, "where is bob?") == [VOCABULARY.index(w) for w in ("where", "is", "bob", "?")]


def test_a_builder_name_without_one_learns_it_from_the_texts():
    backbone, tokenizer = load_checkpoint("bert_tiny", texts=["bob is in paris", "alice is in france"] * 8)
    assert backbone.vocabulary_size == tokenizer.vocabulary_size < 100
    assert tokenizer.unknown_id not in _ids(tokenizer, "alice is in paris")


def test_missing_vocabularies_and_paths(tmp_path):
    _tiny_encoder().save(tmp_path / "model.keras")
    with pytest.raises(
        FileNotFoundError,
        match=r"No vocab.txt, spiece.model or vocab.json with merges.txt beside .*model.keras; pass --vocabulary",
    ):
        load_checkpoint(tmp_path / "model.keras")
    with pytest.raises(FileNotFoundError, match="--vocabulary file not found: .*nowhere.txt"):
        load_checkpoint(tmp_path / "model.keras", vocabulary=tmp_path / "nowhere.txt")
    with pytest.raises(FileNotFoundError, match="--checkpoint file not found: .*other.keras"):
        load_checkpoint(tmp_path / "other.keras")
    with pytest.raises(FileNotFoundError, match="--checkpoint not found: .*no_such_folder"):
        load_checkpoint(tmp_path / "no_such_folder")
    with pytest.raises(ValueError, match="Unknown model 'bert_huge'"):
        load_checkpoint("bert_huge", vocabulary=write_vocabulary(tmp_path))


def test_a_hugging_face_folder_without_a_vocabulary(tmp_path):
    _hugging_face_folder(tmp_path, lowercase=True)
    with pytest.raises(FileNotFoundError, match="No vocab.txt, spiece.model or vocab.json with merges.txt beside"):
        load_checkpoint(tmp_path)


def test_a_vocabulary_larger_than_the_token_table(tmp_path):
    _tiny_encoder(vocabulary_size=10).save(tmp_path / "model.keras")
    write_vocabulary(tmp_path)
    with pytest.raises(ValueError, match=f"The vocabulary has {len(VOCABULARY)} tokens but .*model.keras has 10 rows"):
        load_checkpoint(tmp_path / "model.keras")


def test_a_t5_with_its_sentencepiece_model_beside(tmp_path):
    saved = keras.saving.load_model(write_t5_checkpoint(tmp_path))
    Seq2SeqLM(saved).save(tmp_path / "task.keras")  # a task wrapping it loads too
    for path in ("model.keras", "task.keras"):
        backbone, tokenizer = load_checkpoint(tmp_path / path)
        assert isinstance(backbone, kbert.models.T5) and backbone.vocabulary_size == tokenizer.vocabulary_size
        assert (tokenizer.pad_id, tokenizer.end_id) == (backbone.pad_id, backbone.end_id)


def test_a_t5_builder_name_learns_a_sentencepiece_model():
    backbone, tokenizer = load_checkpoint("t5_small", texts=["bob is in paris", "alice is in france"] * 8)
    assert isinstance(backbone, kbert.models.T5) and isinstance(tokenizer, SentencePieceTokenizer)
    assert backbone.vocabulary_size == tokenizer.vocabulary_size < 100
    assert (tokenizer.pad_id, tokenizer.end_id, tokenizer.unknown_id) == (0, 1, 2)
