"""Tiny synthetic files for every `kbert finetune` task, a vocabulary and a checkpoint that cover them,
and the check of what a finished run saves.

Shared by the fine-tuning job's tests (tests/tasks/test_finetuning_*.py,
test_checkpoint_loading.py) and the CLI's (tests/test_cli.py). Each writer
returns the path it wrote.
"""

import csv
import json
import os

import keras
import numpy as np
import pytest

POSITIVE, NEGATIVE = ("good", "great", "fine"), ("bad", "awful", "dull")
CONTEXT = "bob is in paris. alice is in france."
WORDS = (*POSITIVE, *NEGATIVE, "the", "film", "plot", "was", "it", "is", "in", "where", "who", "bob",
         "alice", "paris", "france", "lives", "new", "york", "##ian", ".", "?")
VOCABULARY = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS)
TAGS = {"bob": "B-PER", "alice": "B-PER", "new": "B-LOC", "york": "I-LOC", "paris": "B-LOC",
        "parisian": "B-MISC"}


def write_checkpoint(folder):
    """A one-layer, 16-wide BERT as `folder/model.keras` with `vocab.txt` beside it (as `kbert pretrain` leaves)."""
    import kbert

    write_vocabulary(folder)
    backbone = kbert.models.build("bert_tiny", num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
                                  vocabulary_size=len(VOCABULARY), max_positions=32, dropout=0.0)
    path = os.path.join(folder, "model.keras")
    backbone.save(path)
    return path


def write_t5_checkpoint(folder):
    """A one-layer, 16-wide T5 as `folder/model.keras`, with a SentencePiece `spiece.model` beside it
    learned from `text_to_text_rows`."""
    import kbert
    from kbert.text import SentencePieceTokenizer, train_sentence_piece

    with open(os.path.join(folder, "spiece.model"), "wb") as f:
        texts = [text for row in text_to_text_rows(40) for text in row.values()]
        f.write(train_sentence_piece(texts, vocabulary_size=48))
    tokenizer = SentencePieceTokenizer(os.path.join(folder, "spiece.model"))
    backbone = kbert.models.build("t5_small", num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
                                  vocabulary_size=tokenizer.vocabulary_size, dropout=0.0)
    path = os.path.join(folder, "model.keras")
    backbone.save(path)
    return path


def write_xlnet_checkpoint(folder, **sizes):
    """A one-layer, 16-wide XLNet (or `sizes`) as `folder/model.keras`, with a SentencePiece `spiece.model`
    beside it that has XLNet's `<cls>` and `<sep>` pieces, learned from the classification and tagging rows."""
    import kbert
    from kbert.text import SentencePieceTokenizer, train_sentence_piece

    texts = [row["text"] for row in classification_rows(40)] + ["bob lives in new york", "alice is parisian ."]
    with open(os.path.join(folder, "spiece.model"), "wb") as f:
        f.write(train_sentence_piece(texts * 4, vocabulary_size=40, control_symbols=("<cls>", "<sep>")))
    tokenizer = SentencePieceTokenizer(os.path.join(folder, "spiece.model"))
    sizes = dict(num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32, **sizes)
    backbone = kbert.models.build("xlnet_tiny", vocabulary_size=tokenizer.vocabulary_size, dropout=0.0, **sizes)
    path = os.path.join(folder, "model.keras")
    backbone.save(path)
    return path


def write_vocabulary(folder):
    path = os.path.join(folder, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCABULARY) + "\n")
    return path


def write_table(path, rows):
    """`rows` (dicts with the same keys) as CSV, TSV (by the suffix, with a header) or JSONL."""
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8", newline="") as f:
        if path.endswith(".jsonl"):
            f.writelines(json.dumps(row) + "\n" for row in rows)
            return path
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t" if path.endswith(".tsv") else ",")
        writer.writeheader()
        writer.writerows(rows)
    return path


def classification_rows(count, pairs=False, classes=2):
    """Sentences of two positive or two negative words; with `classes=3`, "neutral" ones of neither."""
    rows = []
    for i in range(count):
        label = i % classes
        words = (POSITIVE, NEGATIVE, ("film", "plot"))[label]
        row = {"text": f"the {words[i % 2]} {words[(i + 1) % 2]} film"}
        if pairs:
            row["text_pair"] = "it was the plot"
        row["label"] = ("pos", "neg", "neutral")[label] if classes < 3 else label
        rows.append(row)
    return rows


def regression_rows(count):
    """Sentences whose label is their number of positive words (0 to 3)."""
    return [{"text": " ".join(["good"] * (i % 4) + ["the", "film"]), "label": float(i % 4)}
            for i in range(count)]


def text_to_text_rows(count):
    """`classification_rows` cast as T5 text to text: "sentiment: <text>" to "positive" or "negative"."""
    return [{"source": f"sentiment: {row['text']}", "target": "positive" if row["label"] == "pos" else "negative"}
            for row in classification_rows(count)]


def write_conll(path, count):
    """`count` CoNLL-2003 sentences (word, POS, chunk, tag) after a `-DOCSTART-` line."""
    sentences = [["bob", "lives", "in", "new", "york"], ["alice", "is", "parisian", "."]]
    lines = ["-DOCSTART- -X- -X- O", ""]
    for i in range(count):
        lines += [f"{word} NN I-NP {TAGS.get(word, 'O')}" for word in sentences[i % 2]] + [""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return os.fspath(path)


def squad(count, version="1.1"):
    """A SQuAD dict of `count` questions on one context; v2.0 adds unanswerable ones."""
    answers = {"where is bob?": ("paris", 10), "where is alice?": ("france", 29)}
    questions = []
    for i in range(count):
        question = list(answers)[i % 2]
        text, start = answers[question]
        questions.append({"id": f"q{i}", "question": question,
                          "answers": [{"text": text, "answer_start": start}]})
        if version == "2.0" and i % 2:
            questions.append({"id": f"n{i}", "question": "who is in france?", "answers": [],
                              "is_impossible": True})
    return {"version": version, "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": questions}]}]}


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f)
    return os.fspath(path)


def swag_rows(count, endings=4):
    """SWAG rows whose right ending is the only positive one."""
    rows = []
    for i in range(count):
        label = i % endings
        row = {"video-id": f"v{i}", "sent1": "the film was", "sent2": "it was"}
        row.update({f"ending{k}": "good" if k == label else NEGATIVE[k % 3] for k in range(endings)})
        rows.append({**row, "label": label})
    return rows


SUFFIXES = {"classify": ".csv", "regress": ".csv", "tag": ".txt", "qa": ".json", "choice": ".csv",
            "text": ".jsonl"}


def write_task_files(task, folder, count=8, suffix=None, **options):
    """`(train, validation)` files of `task` in `folder`: `count` training rows, half as many to validate.

    `suffix` picks the table format of `classify`, `regress` and `text` (default
    `SUFFIXES[task]`); `options` go to the row makers (`pairs`, `classes`;
    `version` for `qa`; `endings` for `choice`).
    """
    suffix = suffix or SUFFIXES[task]
    paths = [os.path.join(folder, f"{name}{suffix}") for name in ("train", "dev")]
    counts = (count, max(count // 2, 2))
    for path, rows in zip(paths, counts):
        if task == "classify":
            write_table(path, classification_rows(rows, **options))
        elif task == "regress":
            write_table(path, regression_rows(rows))
        elif task == "tag":
            write_conll(path, rows)
        elif task == "qa":
            write_json(path, squad(rows, **options))
        elif task == "text":
            write_table(path, text_to_text_rows(rows))
        else:
            write_table(path, swag_rows(rows, **options))
    return paths


def check_saved(output, metrics, model_class):
    """What a finished run leaves in `output` (a `pathlib.Path`): metrics.json holding `metrics`,
    predictions.jsonl (its rows are returned), a model.keras of `model_class` that loads back, run.json (the
    arguments), no checkpoint."""
    import kbert.tasks  # noqa: F401  (registers the task models)

    assert sorted(os.listdir(output)) == ["metrics.json", "model.keras", "predictions.jsonl", "run.json"]
    with open(output / "metrics.json") as f:  # strict JSON: a NaN metric is null
        saved = json.load(f, parse_constant=lambda name: pytest.fail(f"metrics.json holds {name}"))
    assert list(saved) == list(metrics)
    assert all(saved[k] == v or (saved[k] is None and np.isnan(v)) for k, v in metrics.items())
    assert metrics["backend"] == keras.backend.backend()
    with open(output / "predictions.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert isinstance(keras.saving.load_model(output / "model.keras"), model_class)
    return rows
