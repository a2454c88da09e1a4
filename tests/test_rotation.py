"""The rotation of `rotated` tests (tests/conftest.py): each test one backend, every backend some."""

import pathlib

import pytest
from conftest import BACKENDS, rotation_backend

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.backend_independent  # reads the collected test ids
def test_every_backend_runs_a_share_of_the_rotated_tests(request):
    marked = {path for path in HERE.rglob("test_*.py")
              if path != pathlib.Path(__file__).resolve() and "@pytest.mark.rotated(" in path.read_text()}
    rotated = [item for item in request.session.items if item.get_closest_marker("rotated")]
    if not marked <= {item.path for item in rotated}:
        pytest.skip("checks the rotation over every rotated test: run it with the files that hold them")
    shares = {backend: [item.nodeid for item in rotated if rotation_backend(item.nodeid) == backend]
              for backend in BACKENDS}
    assert all(shares.values()), shares
    assert all(item.get_closest_marker("rotated").kwargs.get("reason") for item in rotated)
