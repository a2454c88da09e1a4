"""FinetuningRecipe: the record each `kbert finetune` task is, and the table of them."""

import dataclasses

import pytest

from kbert.models import T5, Encoder, XLNet
from kbert.jobs.finetuning_recipe import FinetuningRecipe
from kbert.jobs.finetuning_catalog import TASKS

pytestmark = pytest.mark.backend_independent  # task records: the same on every backend, one run


def test_every_task_is_a_complete_record_on_its_backbone():
    assert sorted(TASKS) == ["choice", "classify", "qa", "regress", "tag", "text"]
    for name, task in TASKS.items():
        assert isinstance(task, FinetuningRecipe)
        assert all(callable(getattr(task, field)) for field in ("read", "dataset", "model", "evaluate"))
        expected = {"text": T5, "qa": Encoder, "choice": Encoder}.get(name, (Encoder, XLNet))
        assert task.backbone_type == expected


def test_a_task_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TASKS["classify"].backbone_type = T5
