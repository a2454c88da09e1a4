"""The task harness: the backbone checks on a task or pretrainer, and one `fit` step.

As KerasHub's `run_task_test` does, each task's test file describes a
`TaskCase` and parametrizes one test over `TASK_CHECKS`:

    @pytest.mark.parametrize("check", TASK_CHECKS)
    def test_task_harness(check, tmp_path):
        run_task_check(check, CASE, tmp_path)

Under a mixed policy the task's loss must come out float32 and finite as well.
"""

import dataclasses
from typing import Any
from collections.abc import Callable

import keras
import numpy as np
import pytest
from backbone_harness import BACKBONE_CHECKS, BackboneCase, check_dtype_policy, forward, run_backbone_check
from helpers import BACKEND, to_numpy

from kbert.backend.ops import dtype_name


@dataclasses.dataclass
class TaskCase(BackboneCase):
    """A `BackboneCase` for a task, with its targets.

    Attributes:
        make_targets: `inputs -> targets` valid for the task's loss; None for a
            task that takes no targets (CausalLM reads its inputs).
        unmoved_variables: parts of the paths of trainable variables that one
            step leaves alone because the task never reads them (an unused pooler).
    """

    make_targets: Callable[[dict], Any] | None = None
    unmoved_variables: tuple = ()

    def targets(self, x):
        return None if self.make_targets is None else self.make_targets(x)


def check_mixed_loss(case, policy):
    """The backbone's mixed-policy check, and the loss under it: float32 and finite."""
    model, x = check_dtype_policy(case, policy)
    loss = model.compute_loss(x, case.targets(x), forward(model, x))
    assert dtype_name(loss) == "float32"
    assert np.isfinite(to_numpy(loss))


def check_fit_step(case):
    """One `fit` step: a finite loss, every trainable variable moves, frozen float variables do not."""
    model = case.make_model()
    x = case.inputs()
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-2))
    assert model.trainable_variables, "nothing to train"
    trainable = [to_numpy(v) for v in model.trainable_variables]
    frozen = [(v, to_numpy(v)) for v in model.non_trainable_variables if "float" in dtype_name(v)]
    history = model.fit(x, case.targets(x), batch_size=case.batch_sizes[0], epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    unmoved = [
        v.path
        for v, old in zip(model.trainable_variables, trainable)
        if np.array_equal(to_numpy(v), old) and not any(part in v.path for part in case.unmoved_variables)
    ]
    assert not unmoved, f"trainable variables not updated by the step: {unmoved}"
    for variable, old in frozen:
        np.testing.assert_array_equal(to_numpy(variable), old, err_msg=f"frozen {variable.path} moved")


TASK_CHECKS = BACKBONE_CHECKS + ("fit_step",)


def run_task_check(check, case, tmp_path):
    """Run one of `TASK_CHECKS` on a `TaskCase`."""
    if check in ("mixed_float16", "mixed_bfloat16"):
        check_mixed_loss(case, check)
    elif check == "fit_step":
        check_fit_step(case)
    elif check == "jit_compile" and BACKEND == "torch":
        pytest.skip("on PyTorch, tests/training/test_compiled_training.py trains every task and "
                    "pretrainer compiled: forward, backward and update in one graph, against eager")
    else:
        run_backbone_check(check, case, tmp_path)


def paired_case(make_model, make_batch, lengths=(12, 16), **kwargs):
    """A `TaskCase` from `make_batch(seed, batch, length) -> (inputs, targets)`, seeded by the length.

    The default lengths suit the masked batches of tests/pretraining (6 real tokens or more).
    """
    return TaskCase(
        make_model,
        lambda batch, length: make_batch(length, batch, length)[0],
        make_targets=lambda x: make_batch(x["token_ids"].shape[1], *x["token_ids"].shape)[1],
        lengths=lengths,
        **kwargs,
    )
