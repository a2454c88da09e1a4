"""kbert.checkpoints.registry: one converter per `model_type`, found by `converter_for`."""

import pytest

import kbert.checkpoints  # noqa: F401  (registers the converters)
from kbert.checkpoints.converter import Converter
from kbert.checkpoints.registry import converter_for, register_converter, supported_model_types

pytestmark = pytest.mark.backend_independent  # the converter registry: the same on every backend, one run

KBERT_MODEL_TYPES = [
    "albert",
    "bart",
    "bert",
    "big_bird",
    "camembert",
    "distilbert",
    "electra",
    "gpt2",
    "longformer",
    "roberta",
    "roberta-prelayernorm",
    "t5",
    "xlm-roberta",
    "xlnet",
]


def test_every_family_is_registered_under_its_model_types():
    assert supported_model_types() == KBERT_MODEL_TYPES
    for model_type in KBERT_MODEL_TYPES:
        converter = converter_for(model_type)
        assert isinstance(converter, Converter) and model_type in converter.model_types


def test_unknown_model_type_lists_the_supported_ones():
    with pytest.raises(ValueError, match=r"Unsupported model_type 'reformer'; supported: \['albert', 'bart'"):
        converter_for("reformer")
    with pytest.raises(ValueError, match="Unsupported model_type None"):
        converter_for(None)


class _Named(Converter):
    def __init__(self, *model_types):
        self.model_types = model_types


def test_a_model_type_has_one_converter():
    with pytest.raises(ValueError, match=r"'bert' already has a converter: BertConverter\(bert\)"):
        register_converter(_Named("my_bert", "bert"))
    # Nothing of the refused converter was registered.
    assert "my_bert" not in supported_model_types()
    with pytest.raises(ValueError, match="names no model_types"):
        register_converter(_Named())
