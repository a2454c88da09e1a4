"""The fine-tuning file readers: GLUE tables, CoNLL-2003, SQuAD, SWAG, text to text, and their one-line errors."""

import json
import re

import pytest

from kbert.tasks.readers import (
    label_vocabulary,
    read_classification,
    read_conll,
    read_regression,
    read_squad,
    read_swag,
    read_text_to_text,
)

pytestmark = pytest.mark.backend_independent  # file readers: the same on every backend, one run


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_at(path, line):
    """A regex for an error message that names the file and the line, on one line."""
    return rf"^{re.escape(str(path))}, line {line}: [^\n]+$"


def error_saying(path, line, words):
    """As `error_at`, for a message that says `words` (a regex)."""
    return rf"^{re.escape(str(path))}, line {line}: [^\n]*{words}[^\n]*$"


def test_glue_tsv_without_quoting(tmp_path):
    # SST-2: quotes are text, not CSV quoting (BERT reads GLUE with quotechar=None).
    path = write(tmp_path, "train.tsv", 'sentence\tlabel\n"a " film\t1\nit \'s dull\t0\n\n')
    examples, labels = read_classification(path, text_column="sentence")
    assert examples == [{"text": '"a " film', "label": "1"}, {"text": "it 's dull", "label": "0"}]
    assert labels == ["0", "1"]


def test_pairs_csv_and_jsonl(tmp_path):
    csv_path = write(
        tmp_path,
        "train.csv",
        'text,text_pair,label\n"Hi, there",Yes,entailment\nNo,"multi\nline",neutral\n',
    )
    examples, labels = read_classification(csv_path)
    assert examples[0] == {"text": "Hi, there", "text_pair": "Yes", "label": "entailment"}
    assert examples[1]["text_pair"] == "multi\nline"
    assert labels == ["entailment", "neutral"]

    rows = [
        {"sentence1": "a", "sentence2": "b", "gold_label": 1},
        {"sentence1": "c", "sentence2": "d", "gold_label": 0},
    ]
    jsonl = write(tmp_path, "dev.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    examples, labels = read_classification(
        jsonl, text_column="sentence1", text_pair_column="sentence2", label_column="gold_label"
    )
    assert examples == [
        {"text": "a", "text_pair": "b", "label": "1"},
        {"text": "c", "text_pair": "d", "label": "0"},
    ]
    assert labels == ["0", "1"]


def test_byte_order_mark_and_mrpc_columns(tmp_path):
    text = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t7\t8\tHe said.\tHe says.\n"
    path = write(tmp_path, "mrpc.tsv", text)
    examples, labels = read_classification(
        path, text_column="#1 String", text_pair_column="#2 String", label_column="Quality"
    )
    assert examples == [{"text": "He said.", "text_pair": "He says.", "label": "1"}]


def test_headerless_columns_by_position(tmp_path):
    # GLUE's CoLA train.tsv: source, label, original label, sentence; no header.
    path = write(
        tmp_path, "cola.tsv", "gj04\t1\t\tOur friends won't buy this.\ngj04\t0\t*\tThey drank.\n"
    )
    examples, labels = read_classification(path, text_column=3, label_column=1)
    assert examples == [
        {"text": "Our friends won't buy this.", "label": "1"},
        {"text": "They drank.", "label": "0"},
    ]


def test_label_vocabulary_applied_to_validation(tmp_path):
    train = write(tmp_path, "train.tsv", "text\tlabel\na\tpos\nb\tneg\n")
    dev = write(tmp_path, "dev.tsv", "text\tlabel\nc\tneg\nd\tmixed\n")
    _, labels = read_classification(train)
    assert labels == ["neg", "pos"]
    with pytest.raises(ValueError, match=error_at(dev, 3)) as error:
        read_classification(dev, labels=labels)
    assert "'mixed'" in str(error.value) and "not seen in training" in str(error.value)
    assert read_classification(dev, labels=labels + ["mixed"])[1] == ["neg", "pos", "mixed"]
    assert label_vocabulary(["10", "9", "-1"]) == ["-1", "9", "10"]


def test_unlabelled_file(tmp_path):
    path = write(tmp_path, "test.tsv", "index\tsentence\n0\tHello\n")
    examples, labels = read_classification(path, text_column="sentence", label_column=None)
    assert examples == [{"text": "Hello"}] and labels is None


def test_regression(tmp_path):
    path = write(tmp_path, "sts.tsv", "sentence1\tsentence2\tscore\na\tb\t3.8\nc\td\t0\n")
    examples = read_regression(
        path, text_column="sentence1", text_pair_column="sentence2", label_column="score"
    )
    assert [e["label"] for e in examples] == [3.8, 0.0]
    bad = write(tmp_path, "bad.tsv", "text\tlabel\na\t1.5\nb\thigh\n")
    with pytest.raises(ValueError, match=error_at(bad, 3)) as error:
        read_regression(bad)
    assert "'high' is not a finite number" in str(error.value)
    for label in ("NaN", "Infinity", "true", "null"):  # JSON's NaN and a boolean are no scores
        bad = write(tmp_path, "bad.jsonl", f'{{"text": "a", "label": 1}}\n{{"text": "b", "label": {label}}}\n')
        with pytest.raises(ValueError, match=error_saying(bad, 2, "is not a finite number")):
            read_regression(bad)
    nan = write(tmp_path, "nan.tsv", "text\tlabel\na\tnan\n")
    with pytest.raises(ValueError, match=error_at(nan, 2)):
        read_regression(nan)


def test_classification_labels_one_scheme(tmp_path):
    """A whole number is one class however it is written; empty, null, boolean and fraction labels are refused."""
    path = write(tmp_path, "train.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": 1.0}\n'
                 '{"text": "c", "label": "1"}\n{"text": "d", "label": 0}\n')
    examples, labels = read_classification(path)
    assert labels == ["0", "1"] and [e["label"] for e in examples] == ["1", "1", "1", "0"]
    tsv = write(tmp_path, "train.tsv", "text\tlabel\na\t1.0\nb\t2\n")
    assert read_classification(tsv)[1] == ["1", "2"]
    for label, problem in (("null", "is empty"), ('""', "is empty"), ('" "', "is empty"),
                           ("true", "JSON boolean"), ("0.5", "is a fraction")):
        bad = write(tmp_path, "bad.jsonl", f'{{"text": "a", "label": 1}}\n{{"text": "b", "label": {label}}}\n')
        with pytest.raises(ValueError, match=error_saying(bad, 2, problem)):
            read_classification(bad)
    empty = write(tmp_path, "empty.tsv", "text\tlabel\na\t\n")
    with pytest.raises(ValueError, match=error_saying(empty, 2, "is empty")):
        read_classification(empty)


def test_table_errors(tmp_path):
    path = write(tmp_path, "train.tsv", "sentence\tlabel\na\t1\n")
    with pytest.raises(ValueError, match=error_at(path, 2)) as error:
        read_classification(path)
    assert "no column 'text'" in str(error.value) and "['sentence', 'label']" in str(error.value)
    # A pair column asked for by name must be there.
    with pytest.raises(ValueError, match="no column 'sentence2'"):
        read_classification(path, text_column="sentence", text_pair_column="sentence2")
    for name, text in [("empty.tsv", ""), ("header.csv", "text,label\n"), ("blank.jsonl", "\n\n")]:
        empty = write(tmp_path, name, text)
        with pytest.raises(ValueError, match=rf"^{re.escape(str(empty))} is empty"):
            read_classification(empty)
    short = write(tmp_path, "short.tsv", "text\tlabel\na\t1\nb\n")
    with pytest.raises(ValueError, match=error_at(short, 3)):
        read_classification(short)
    jsonl = write(tmp_path, "train.jsonl", '{"text": "a", "label": 1}\n{"text": "b"}\n{oops\n')
    with pytest.raises(ValueError, match=error_at(jsonl, 2)) as error:
        read_classification(jsonl)
    assert "no key 'label'" in str(error.value)
    with pytest.raises(ValueError, match="unknown table format"):
        read_classification(write(tmp_path, "data.txt", "text\n"))
    with pytest.raises(ValueError, match="not found"):
        read_classification(tmp_path / "missing.tsv")


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


def test_conll(tmp_path):
    path = write(tmp_path, "train.txt", CONLL)
    sentences, labels = read_conll(path)
    assert sentences == [
        {"words": ["EU", "rejects", "German"], "tags": ["B-ORG", "O", "B-MISC"]},
        {"words": ["Peter", "Blackburn"], "tags": ["B-PER", "I-PER"]},
    ]
    assert labels == ["B-MISC", "B-ORG", "B-PER", "I-PER", "O"]
    # Two columns (word and tag) are enough; no blank line at the end.
    two = write(tmp_path, "two.txt", "Paris B-LOC\nis O")
    assert read_conll(two, labels=labels + ["B-LOC"])[0] == [
        {"words": ["Paris", "is"], "tags": ["B-LOC", "O"]}
    ]


def test_conll_errors(tmp_path):
    one = write(tmp_path, "one.txt", "EU B-ORG\n\nrejects\n")
    with pytest.raises(ValueError, match=error_at(one, 3)) as error:
        read_conll(one)
    assert "one column" in str(error.value)
    for text in ("", "-DOCSTART- -X- O\n\n\n"):
        empty = write(tmp_path, "empty.txt", text)
        with pytest.raises(ValueError, match=rf"^{re.escape(str(empty))} is empty"):
            read_conll(empty)
    dev = write(tmp_path, "dev.txt", "EU B-ORG\nrejects O\n\nX B-LOC\n")
    with pytest.raises(ValueError, match=error_at(dev, 4)) as error:
        read_conll(dev, labels=["B-ORG", "O"])
    assert "'B-LOC'" in str(error.value)


def squad(version_2):
    qas = [
        {"id": "q1", "question": "Where is Paris?",
         "answers": [{"text": "France", "answer_start": 12}]},
        {"id": "q2", "question": "Who?", "answers": [
            {"text": "Paris", "answer_start": 0}, {"text": "Paris is", "answer_start": 0}]},
    ]  # fmt: skip
    if version_2:
        qas.append({"id": "q3", "question": "When?", "answers": [], "is_impossible": True,
                    "plausible_answers": [{"text": "in", "answer_start": 9}]})  # fmt: skip
    paragraph = {"context": "Paris is in France.", "qas": qas}
    return {
        "version": "v2.0" if version_2 else "1.1",
        "data": [{"title": "P", "paragraphs": [paragraph]}],
    }


@pytest.mark.parametrize("version_2", [False, True], ids=["v1.1", "v2.0"])
def test_squad(tmp_path, version_2):
    path = write(tmp_path, "squad.json", json.dumps(squad(version_2)))
    examples = read_squad(path)
    assert [e["id"] for e in examples] == ["q1", "q2", "q3"][: 2 + version_2]
    assert examples[0] == {
        "id": "q1",
        "question": "Where is Paris?",
        "context": "Paris is in France.",
        "answers": [{"text": "France", "answer_start": 12}],
        "is_impossible": False,
    }
    assert len(examples[1]["answers"]) == 2
    if version_2:
        assert examples[2]["is_impossible"] and examples[2]["answers"] == []


def test_squad_errors(tmp_path):
    data = squad(True)
    data["data"][0]["paragraphs"][0]["qas"][1]["answers"][1]["answer_start"] = 1
    path = write(tmp_path, "bad.json", json.dumps(data))
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(path))}, question q2: [^\n]+$"
    ) as error:
        read_squad(path)
    assert "'Paris is' is not at its answer_start 1" in str(error.value)
    empty = write(tmp_path, "empty.json", json.dumps({"data": [{"paragraphs": []}]}))
    with pytest.raises(ValueError, match="is empty"):
        read_squad(empty)
    with pytest.raises(ValueError, match="not SQuAD JSON"):
        read_squad(write(tmp_path, "list.json", "[1, 2]"))
    with pytest.raises(ValueError, match=error_at(tmp_path / "broken.json", 2)):
        read_squad(write(tmp_path, "broken.json", '{"data":\n oops}'))


SWAG_HEADER = (
    ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
)


def test_swag(tmp_path):
    path = write(
        tmp_path,
        "train.csv",
        SWAG_HEADER
        + '0,v1,5,"He sits. He","He sits.",He,gold,"eats.","runs, fast.",sleeps.,reads.,1\n'
        + "1,v2,6,x,She opens the door.,She,gen,waves.,smiles.,leaves.,sings.,3\n",
    )
    examples = read_swag(path)
    assert examples[0] == {
        "context": "He sits.",
        "choices": ["He eats.", "He runs, fast.", "He sleeps.", "He reads."],
        "label": 1,
    }
    assert examples[1]["label"] == 3
    test = write(
        tmp_path, "test.csv", SWAG_HEADER.replace(",label", "") + "0,v,1,x,A.,B,g,c,d,e,f\n"
    )
    assert read_swag(test) == [{"context": "A.", "choices": ["B c", "B d", "B e", "B f"]}]


def test_swag_errors(tmp_path):
    row = "0,v1,5,x,He sits.,He,gold,eats.,runs.,sleeps.,reads.,1\n"
    short = write(tmp_path, "short.csv", SWAG_HEADER + row + row.replace("sleeps.", ""))
    with pytest.raises(ValueError, match=error_at(short, 3)) as error:
        read_swag(short)
    assert "3 choices where the other rows have 4" in str(error.value)
    gap = write(tmp_path, "gap.csv", SWAG_HEADER.replace("ending2", "ending7") + row)
    with pytest.raises(ValueError, match="ending0, ending1, ... without gaps"):
        read_swag(gap)
    no_sent1 = write(tmp_path, "nosent.csv", SWAG_HEADER.replace("sent1", "first") + row)
    with pytest.raises(ValueError, match=error_at(no_sent1, 2)) as error:
        read_swag(no_sent1)
    assert "no column 'sent1'" in str(error.value)
    bad_label = write(tmp_path, "label.csv", SWAG_HEADER + row.replace(",1\n", ",4\n"))
    with pytest.raises(ValueError, match=error_at(bad_label, 2)):
        read_swag(bad_label)
    extra = write(tmp_path, "extra.csv", SWAG_HEADER + row.replace(",1\n", ",x,1\n"))
    with pytest.raises(ValueError, match=error_at(extra, 2)):
        read_swag(extra)
    for text in ("", SWAG_HEADER):
        empty = write(tmp_path, "empty.csv", text)
        with pytest.raises(ValueError, match=rf"^{re.escape(str(empty))} is empty"):
            read_swag(empty)


def test_text_to_text_tsv_and_jsonl(tmp_path):
    tsv = write(tmp_path, "train.tsv", "id\tsource\ttarget\n7\tsst2 sentence: a fine film.\tpositive\n")
    jsonl = write(tmp_path, "train.jsonl", json.dumps({"source": "cola sentence: Him ran.", "target": "unacceptable"}))
    assert read_text_to_text(tsv) == [{"source": "sst2 sentence: a fine film.", "target": "positive"}]
    assert read_text_to_text(jsonl) == [{"source": "cola sentence: Him ran.", "target": "unacceptable"}]
    named = write(tmp_path, "named.csv", "question,answer\nWho?,Bob\n")
    assert read_text_to_text(named, "question", "answer") == [{"source": "Who?", "target": "Bob"}]


def test_text_to_text_errors(tmp_path):
    missing = write(tmp_path, "missing.csv", "source,label\nsome text,1\n")
    with pytest.raises(ValueError, match=error_at(missing, 2)) as error:
        read_text_to_text(missing)
    assert "no column 'target'" in str(error.value)
    empty_target = write(tmp_path, "empty.csv", "source,target\na,b\nsome text, \n")
    with pytest.raises(ValueError, match=re.escape(f"{empty_target}, line 3: the 'target' column is empty.")):
        read_text_to_text(empty_target)
    not_text = write(tmp_path, "numbers.jsonl", json.dumps({"source": "a", "target": 3}))
    with pytest.raises(ValueError, match=re.escape(f"{not_text}, line 1: column 'target' holds 3, not text.")):
        read_text_to_text(not_text)
    with pytest.raises(ValueError, match="is empty: it has no rows"):
        read_text_to_text(write(tmp_path, "nothing.jsonl", ""))
