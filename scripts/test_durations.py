"""The slowest tests of each backend's run, from the JUnit reports that `scripts/test.sh` writes.

    python scripts/test_durations.py [REPORTS_FOLDER] [--top 30] [--budget 20]

`scripts/test.sh` runs the suite once per backend and leaves
`test-reports/<backend>.xml` (`<backend>.<shard>.xml` for a backend run in
shards, read together); this prints, for each backend, the run's total
test time and its `--top` slowest tests, and then every test over `--budget`
seconds that is not marked `slow` (CONTRIBUTING.md: such a test is marked
`@pytest.mark.slow(reason=...)`, and `make test` still runs it). Timing is
reported, never asserted.
"""

import argparse
import pathlib
import sys
import xml.etree.ElementTree as ElementTree


def read_report(path):
    """`[(seconds, test id, slow reason or None)]` of one JUnit report, slowest first."""
    tests = []
    for case in ElementTree.parse(path).iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        tests.append((float(case.get("time", 0.0)), name, properties.get("slow")))
    return sorted(tests, reverse=True)


def summary(backend, tests, top, budget):
    """The lines printed for one backend's report."""
    lines = [f"== {backend}: {len(tests)} tests, {sum(t for t, _, _ in tests):.0f} s of test time; "
             f"the {min(top, len(tests))} slowest:"]
    lines += [f"{seconds:8.1f} s  {name}" + (" [slow]" if slow else "") for seconds, name, slow in tests[:top]]
    unmarked = [(seconds, name) for seconds, name, slow in tests if seconds > budget and not slow]
    if unmarked:
        lines.append(f"   over {budget:g} s and not marked slow:")
        lines += [f"{seconds:8.1f} s  {name}" for seconds, name in unmarked]
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="?", default="test-reports")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds over which a test is marked slow")
    args = parser.parse_args(argv)
    paths = sorted(pathlib.Path(args.reports).glob("*.xml"))
    if not paths:
        sys.exit(f"test_durations: no JUnit report (*.xml) in {args.reports}; scripts/test.sh writes them")
    backends = {}
    for path in paths:  # jax.1.xml and jax.2.xml: one backend's run in two shards
        backends.setdefault(path.stem.split(".")[0], []).extend(read_report(path))
    for backend, tests in backends.items():
        print("\n".join(summary(backend, sorted(tests, reverse=True), args.top, args.budget)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
