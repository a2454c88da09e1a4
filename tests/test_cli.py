"""The `kbert` command: the tour runs on the current backend; bad input exits with one line."""

import pytest

from kbert import cli


def test_tour_prints_shapes_and_parameter_count(capsys):
    assert cli.main(["tour", "--model", "bert_tiny", "--sentence", "Hello, kbert world!"]) == 0
    printed = capsys.readouterr().out
    assert "4,385,920" in printed
    assert "[CLS] hello , kbert world ! [SEP]" in printed
    assert "sequence_output" in printed and "(1, 7, 128)" in printed


def test_tour_on_a_model_without_segments(capsys):
    cli.main(["tour", "--model", "distilbert_base", "--sentence", "Short."])
    printed = capsys.readouterr().out
    assert "segment_ids" not in printed and "66,362,880" in printed


def test_unknown_model_exits_with_one_line():
    with pytest.raises(SystemExit, match="^kbert: Unknown model 'bert_huge'"):
        cli.main(["tour", "--model", "bert_huge"])


def test_tour_refuses_an_encoder_decoder():
    with pytest.raises(SystemExit, match="^kbert: the tour runs the encoders; t5_small"):
        cli.main(["tour", "--model", "t5_small"])
