"""Readers of the fine-tuning data formats: GLUE-style tables, CoNLL-2003, SQuAD, SWAG, text-to-text.

Plain Python (`csv`, `json`), the same on every backend, without TensorFlow.
Each reader returns a list of dicts, one per example, with the keys the
`kbert.tasks.input_pipelines` builders take:

- `read_classification` and `read_regression`: `text`, `text_pair` (for
  sentence pairs) and `label` (a string, or a float for regression);
- `read_conll`: `words` and `tags`, lists of strings;
- `read_squad`: `id`, `question`, `context`, `answers` (a list of
  `{"text", "answer_start"}`) and `is_impossible`;
- `read_swag`: `context`, `choices` (a list of strings) and `label` (an int);
- `read_text_to_text`: `source` and `target` (T5's text-to-text format).

Bad input raises a one-line `ValueError` naming the file and the line:
a missing column, an empty file, a label not seen in training, a regression
label that is not a number, a CoNLL line with one column, a SQuAD answer whose
text is not at its `answer_start`, SWAG rows with different choice counts.

Example:

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "train.tsv"
>>> _ = path.write_text("sentence\\tlabel\\nA fine film.\\t1\\nDull.\\t0\\n")
>>> examples, labels = read_classification(path, text_column="sentence")
>>> examples[0], labels
({'text': 'A fine film.', 'label': '1'}, ['0', '1'])
"""

import csv
import json
import math
import os
import re

_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
_ENDING = re.compile(r"ending(\d+)")


def _file_format(path):
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _FORMATS:
        raise ValueError(f"{path}: unknown table format {suffix!r}; use .tsv, .csv or .jsonl.")
    return _FORMATS[suffix]


def _check_file(path):
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a folder; give a file.")
    if not os.path.isfile(path):
        raise ValueError(f"File not found: {path!r}.")
    return path


def _open(path):
    # "utf-8-sig": a byte-order mark some editors write is not part of the first column name.
    return open(_check_file(path), encoding="utf-8-sig", newline="")


def _lines(path):
    """`(line number, text)` of every line of the file `path`, decoded as UTF-8 one line at a time; a
    `ValueError` names the line of bytes that are not UTF-8. A byte-order mark some editors write is
    not part of the first line."""
    with open(_check_file(path), "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}, line {number}: bytes that are not UTF-8 "
                                 f"({error.object[error.start:error.end]!r}); save the file as UTF-8.") from None


def _delimited_rows(path, delimiter, has_header):
    """`(line, dict)` rows of a TSV or CSV; keys are the header's names, or column indices."""
    # GLUE's TSVs hold unbalanced quotes: no quoting in them, as BERT reads them.
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader((line for _, line in _lines(path)), delimiter=delimiter, quoting=quoting)
    header = next(reader, None) if has_header else None
    for values in reader:
        if not values:  # a blank line
            continue
        if header is not None and len(values) != len(header):
            raise ValueError(
                f"{path}, line {reader.line_num}: {len(values)} fields where the header "
                f"has {len(header)}."
            )
        yield reader.line_num, dict(zip(header or range(len(values)), values))


def json_rows(path):
    """`(line number, object)` for every non-blank line of a JSONL file; a `ValueError` names a bad line."""
    for line_number, line in _lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {line_number}: not JSON ({error.msg}).") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {line_number}: a JSON object is expected.")
        _check_encodable(path, line_number, row)
        yield line_number, row


def _check_encodable(path, line, row):
    """A `ValueError` naming the line when a string of `row` holds a lone surrogate (`\\ud800`), no character."""
    for key, value in row.items():
        for text in (key, *(value if isinstance(value, list) else [value])):
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(f"{path}, line {line}: {key!r} holds a lone surrogate escape (\\ud800 to "
                                     "\\udfff), which is no character.") from None


def _table_rows(path, columns, optional=()):
    """`(line, {column: value})` for every row of a TSV, CSV or JSONL file.

    `columns` are names (the file has a header row, or JSON keys) or all
    integers (positions in a TSV or CSV without a header). An `optional`
    column is read when the first row has it, and then required of every row.
    """
    path = os.fspath(path)
    file_format = _file_format(path)
    by_position = all(isinstance(c, int) for c in columns)
    if not by_position and not all(isinstance(c, str) for c in columns):
        raise ValueError(f"Columns are all names or all positions; received {columns}.")
    if file_format == "jsonl":
        if by_position:
            raise ValueError(f"{path}: JSON lines have no column positions; name the keys.")
        rows = json_rows(path)
    else:
        rows = _delimited_rows(path, "\t" if file_format == "tsv" else ",", not by_position)
    wanted = None
    for line, row in rows:
        if wanted is None:
            wanted = list(columns) + [c for c in optional if c in row]
        missing = [c for c in wanted if c not in row]
        if missing:
            what = "key" if file_format == "jsonl" else "column"
            raise ValueError(
                f"{path}, line {line}: no {what} {missing[0]!r}; the row has {list(row)}."
            )
        yield line, {c: row[c] for c in wanted}
    if wanted is None:
        raise ValueError(f"{path} is empty: it has no rows.")


def _text(path, line, value, column):
    if not isinstance(value, str):
        raise ValueError(f"{path}, line {line}: column {column!r} holds {value!r}, not text.")
    return value


def _text_rows(path, text_column, text_pair_column, label_column):
    """Examples with `text`, `text_pair` and the raw `label`, and their lines."""
    columns = [c for c in (text_column, text_pair_column, label_column) if c is not None]
    # The default pair column is read when the file has it.
    optional = ["text_pair"] if text_pair_column is None and isinstance(text_column, str) else []
    pair_column = "text_pair" if text_pair_column is None else text_pair_column
    for line, row in _table_rows(path, columns, optional):
        example = {"text": _text(path, line, row[text_column], text_column)}
        if pair_column in row:
            example["text_pair"] = _text(path, line, row[pair_column], pair_column)
        if label_column is not None:
            example["label"] = row[label_column]
        yield line, example


def label_vocabulary(values):
    """The sorted distinct labels: by value when all are integers, else as strings.

    >>> label_vocabulary(["2", "10", "1"]), label_vocabulary(["neutral", "entailment"])
    (['1', '2', '10'], ['entailment', 'neutral'])
    """
    values = set(values)
    if all(re.fullmatch(r"-?\d+", v) for v in values):
        return sorted(values, key=int)
    return sorted(values)


def _class_name(path, line, value):
    """The class a classification label names: a non-empty string, or an integer written as one.

    A whole number is one class however it is written (`1`, `1.0` and `"1"` name the class `"1"`);
    an empty or null label, a JSON boolean and a fraction are refused, one line each.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{path}, line {line}: the label is empty ({json.dumps(value)}); every example needs "
                         "its class.")
    if isinstance(value, bool):
        raise ValueError(f"{path}, line {line}: the label {json.dumps(value)} is a JSON boolean; write classes "
                         "as strings or integers (\"1\", \"0\" or names).")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        raise ValueError(f"{path}, line {line}: the label {value!r} is a fraction, not a class; a number to "
                         "predict is regression (--task regress).")
    text = str(value)
    whole = re.fullmatch(r"(-?\d+)\.0*", text)  # "1.0" in a TSV names the class of "1"
    return str(int(whole.group(1))) if whole else text


def _check_label(path, line, label, labels):
    if label not in labels:
        raise ValueError(
            f"{path}, line {line}: label {label!r} was not seen in training; "
            f"the labels are {labels}."
        )


def read_classification(
    path, labels=None, text_column="text", text_pair_column=None, label_column="label"
):
    """Read text-classification examples from a TSV or CSV with a header row, or JSONL.

    Args:
        path: a `.tsv` (GLUE's files: tab-separated, no quoting), `.csv` or
            `.jsonl` file.
        labels: the label vocabulary of the training file; every label must be
            in it. `None` builds it from this file (`label_vocabulary`).
        text_column: the column of the text (GLUE: `sentence`, `question`,
            `sentence1`, `#1 String`).
        text_pair_column: the column of the second text of a pair (GLUE:
            `sentence`, `sentence2`, `#2 String`). `None` takes the column
            `text_pair` when the file has one, and single texts otherwise.
        label_column: the column of the label (GLUE: `label`, `gold_label`,
            `Quality`); `None` for a file without labels. Integer labels in
            JSON are read as their strings.

        Columns given as integers are positions in a TSV or CSV without a
        header row (GLUE's CoLA: `text_column=3, label_column=1`).

    Returns:
        `(examples, labels)`: a list of dicts with `text`, `text_pair` (pairs
        only) and `label` (a string of `labels`), and the label vocabulary.

    Raises:
        ValueError: missing file or column, empty file, a label outside `labels`.
    """
    examples = []
    for line, example in _text_rows(path, text_column, text_pair_column, label_column):
        if label_column is not None:
            example["label"] = _class_name(path, line, example["label"])
            if labels is not None:
                _check_label(path, line, example["label"], labels)
        examples.append(example)
    if labels is None and label_column is not None:
        labels = label_vocabulary(example["label"] for example in examples)
    return examples, None if labels is None else list(labels)


def _regression_label(path, line, value):
    """`value` as a finite float; a `ValueError` for text that is no number, a boolean, NaN or infinity."""
    try:
        number = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number):
        raise ValueError(f"{path}, line {line}: the label {value!r} is not a finite number.")
    return number


def read_regression(path, text_column="text", text_pair_column=None, label_column="label"):
    """Read text-regression examples (STS-B): as `read_classification`, with float labels.

    Returns:
        A list of dicts with `text`, `text_pair` (pairs only) and `label` (a float).

    Raises:
        ValueError: missing file or column, empty file, a label that is not a number.
    """
    examples = []
    for line, example in _text_rows(path, text_column, text_pair_column, label_column):
        example["label"] = _regression_label(path, line, example["label"])
        examples.append(example)
    return examples


def read_conll(path, labels=None):
    """Read CoNLL-2003 columns: a word per line, its tag last, a blank line between sentences.

    Columns are separated by white space; the word is the first, the tag
    the last (the part-of-speech and chunk columns between are ignored).
    `-DOCSTART-` lines are skipped.

    Args:
        path: the file.
        labels: the tag vocabulary of the training file; `None` builds it
            from this file (sorted).

    Returns:
        `(sentences, labels)`: a list of dicts with `words` and `tags` (lists
        of strings), and the tag vocabulary.

    Raises:
        ValueError: missing file, empty file, a line with one column, a tag
            outside `labels`.
    """
    path = os.fspath(path)
    sentences, words, tags = [], [], []
    with _open(path) as f:
        for line_number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append({"words": words, "tags": tags})
                words, tags = [], []
                continue
            if len(fields) < 2:
                raise ValueError(
                    f"{path}, line {line_number}: one column ({line.strip()!r}); a word and "
                    "its tag are expected."
                )
            if labels is not None:
                _check_label(path, line_number, fields[-1], labels)
            words.append(fields[0])
            tags.append(fields[-1])
    if words:
        sentences.append({"words": words, "tags": tags})
    if not sentences:
        raise ValueError(f"{path} is empty: it has no sentences.")
    if labels is None:
        labels = sorted({tag for sentence in sentences for tag in sentence["tags"]})
    return sentences, list(labels)


def _squad_example(path, qa, context):
    question_id = qa.get("id")
    if not isinstance(question_id, str) or not isinstance(qa.get("question"), str):
        raise ValueError(f"{path}: a question without a string `id` or `question`: {qa!r:.80}.")
    answers = []
    for answer in qa.get("answers", []):
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not isinstance(start, int):
            raise ValueError(f"{path}, question {question_id}: malformed answer {answer!r}.")
        if context[start : start + len(text)] != text:
            found = context[start : start + len(text)]
            raise ValueError(
                f"{path}, question {question_id}: the answer {text!r} is not at its "
                f"answer_start {start} (the context has {found!r} there)."
            )
        answers.append({"text": text, "answer_start": start})
    return {
        "id": question_id,
        "question": qa["question"],
        "context": context,
        "answers": answers,
        "is_impossible": bool(qa.get("is_impossible", False)),
    }


def read_squad(path):
    """Read SQuAD JSON, v1.1 or v2.0: one example per question.

    Returns:
        A list of dicts with `id`, `question`, `context`, `answers` (a list of
        `{"text", "answer_start"}`, empty for an unanswerable question) and
        `is_impossible` (False in v1.1).

    Raises:
        ValueError: missing file, not SQuAD JSON, no questions, an answer
            whose text is not at its `answer_start` in the context.
    """
    path = os.fspath(path)
    with _open(path) as f:
        try:
            dataset = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {error.lineno}: not JSON ({error.msg}).") from None
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise ValueError(f"{path}: not SQuAD JSON (no `data` list of articles).")
    examples = [
        _squad_example(path, qa, paragraph["context"])
        for article in dataset["data"]
        for paragraph in article.get("paragraphs", [])
        for qa in paragraph.get("qas", [])
    ]
    if not examples:
        raise ValueError(f"{path} is empty: it has no questions.")
    return examples


def _ending_columns(path, header):
    """SWAG's `ending0 .. ending{k-1}` columns, checked to be numbered from 0 without gaps."""
    numbers = sorted(int(m.group(1)) for m in map(_ENDING.fullmatch, header) if m)
    if len(numbers) < 2 or numbers != list(range(len(numbers))):
        raise ValueError(
            f"{path}: the choices must be in columns ending0, ending1, ... without gaps; "
            f"the header has {header}."
        )
    return [f"ending{n}" for n in numbers]


def read_swag(path):
    """Read SWAG's CSV (the official train and validation files; the test file has no label).

    The context is `sent1`; choice `i` is `sent2 + " " + ending{i}`.

    Returns:
        A list of dicts with `context`, `choices` (a list of strings) and
        `label` (the index of the right choice; absent without a `label` column).

    Raises:
        ValueError: missing file or column, empty file, a row whose choice
            count differs from the others (an empty ending), a label that is
            not a choice index.
    """
    path = os.fspath(path)
    if _file_format(path) != "csv":
        raise ValueError(f"{path}: SWAG files are CSV (.csv).")
    with _open(path) as f:
        header = next(csv.reader(f), None)
    if header is None:
        raise ValueError(f"{path} is empty: it has no rows.")
    endings = _ending_columns(path, header)
    examples = []
    for line, row in _table_rows(path, ["sent1", "sent2", *endings], optional=["label"]):
        choices = [row["sent2"] + " " + row[e] for e in endings if row[e].strip()]
        if len(choices) != len(endings):
            raise ValueError(
                f"{path}, line {line}: {len(choices)} choices where the other rows have "
                f"{len(endings)} (an empty ending column)."
            )
        example = {"context": row["sent1"], "choices": choices}
        if "label" in row:
            if row["label"] not in [str(i) for i in range(len(endings))]:
                raise ValueError(
                    f"{path}, line {line}: the label {row['label']!r} is not a choice index "
                    f"(0 to {len(endings) - 1})."
                )
            example["label"] = int(row["label"])
        examples.append(example)
    return examples


def read_text_to_text(path, source_column="source", target_column="target"):
    """Read text-to-text pairs (T5) from a TSV or CSV with a header row, or JSONL.

    T5 casts every task as text to text: `source` is the prefixed input
    ("sst2 sentence: a fine film.", "translate English to German: ..."),
    `target` the text to generate ("positive", "Das Haus ist klein.").

    Returns:
        A list of dicts with `source` and `target`.

    Raises:
        ValueError: missing file or column, empty file, an empty source or target.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "train.jsonl"
    >>> _ = path.write_text('{"source": "sst2 sentence: a fine film.", "target": "positive"}\\n')
    >>> read_text_to_text(path)
    [{'source': 'sst2 sentence: a fine film.', 'target': 'positive'}]
    """
    examples = []
    for line, row in _table_rows(path, [source_column, target_column]):
        example = {}
        for key, column in (("source", source_column), ("target", target_column)):
            example[key] = _text(path, line, row[column], column)
            if not example[key].strip():
                raise ValueError(f"{os.fspath(path)}, line {line}: the {column!r} column is empty.")
        examples.append(example)
    return examples
