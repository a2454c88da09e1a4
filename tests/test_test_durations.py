"""scripts/test_durations.py: the slowest tests per backend and the unmarked slow ones, from JUnit reports."""

import importlib.util
import pathlib

import pytest

pytestmark = pytest.mark.backend_independent  # reads XML files

ROOT = pathlib.Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("test_durations", ROOT / "scripts" / "test_durations.py")
test_durations = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(test_durations)

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.jobs.test_a" name="test_fast" time="0.5"/>
<testcase classname="tests.jobs.test_a" name="test_marked" time="31.0">
<properties><property name="slow" value="a whole pretraining run"/></properties></testcase>
<testcase classname="tests.test_b" name="test_unmarked[x]" time="25.0"/>
</testsuite></testsuites>"""


def test_the_report_lists_the_slowest_first_and_the_unmarked_slow_tests(tmp_path, capsys):
    (tmp_path / "jax.xml").write_text(REPORT)
    assert test_durations.main([str(tmp_path), "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "== jax: 3 tests, 56 s of test time; the 2 slowest:"
    assert lines[1].split() == ["31.0", "s", "tests/jobs/test_a.py::test_marked", "[slow]"]
    assert lines[2].split() == ["25.0", "s", "tests/test_b.py::test_unmarked[x]"]
    assert lines[3].strip() == "over 20 s and not marked slow:"
    assert lines[4:] == ["    25.0 s  tests/test_b.py::test_unmarked[x]"]


def test_a_folder_without_reports_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"^test_durations: no JUnit report \(\*\.xml\) in .*scripts/test.sh writes"):
        test_durations.main([str(tmp_path)])


def test_a_backend_run_in_shards_is_reported_as_one(tmp_path, capsys):
    (tmp_path / "jax.1.xml").write_text(REPORT)
    (tmp_path / "jax.2.xml").write_text(REPORT.replace("test_a", "test_c"))
    test_durations.main([str(tmp_path), "--top", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "== jax: 6 tests, 113 s of test time; the 1 slowest:"
