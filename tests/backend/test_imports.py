"""`kbert.backend.imports`: quiet imports, and the TensorFlow that only feeds data started on the host alone."""

import os
import sys
import types

import pytest

from kbert.backend.imports import _start_data_only_tensorflow, quiet_import


def test_quiet_import_returns_the_module():
    module = quiet_import("json")
    import json

    assert module is json


def test_quiet_import_silences_native_stderr(tmp_path, capfd):
    # A module that writes to file descriptor 2 directly, like a C++ logger.
    (tmp_path / "kbert_noisy_module.py").write_text(
        "import os\nos.write(2, b'native start-up noise\\n')\nVALUE = 42\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        module = quiet_import("kbert_noisy_module")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("kbert_noisy_module", None)
    assert module.VALUE == 42
    os.write(2, b"after\n")  # stderr works again afterwards
    captured = capfd.readouterr()
    assert "native start-up noise" not in captured.err
    assert "after" in captured.err


def test_quiet_import_propagates_errors_and_restores_stderr(capfd):
    with pytest.raises(ModuleNotFoundError, match="kbert_no_such_module"):
        quiet_import("kbert_no_such_module")
    os.write(2, b"still here\n")
    assert "still here" in capfd.readouterr().err


class _TensorFlowConfig:
    """`tf.config`'s device calls as TensorFlow answers them, on a host with a CPU and a GPU."""

    def __init__(self, started):
        self.visible, self.started = ["CPU:0", "GPU:0"], started

    def get_visible_devices(self, device_type=None):
        return [device for device in self.visible if device_type in (None, device.split(":")[0])]

    def set_visible_devices(self, devices, device_type=None):
        if self.started:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        self.visible = [device for device in self.visible if device_type not in (None, device.split(":")[0])]
        self.visible += devices

    def list_logical_devices(self):
        self.started = True


@pytest.mark.backend_independent
@pytest.mark.parametrize("backend, started, visible", [
    ("jax", False, ["CPU:0"]), ("torch", False, ["CPU:0"]), ("tensorflow", False, ["CPU:0", "GPU:0"]),
    ("jax", True, ["CPU:0", "GPU:0"])])
def test_tensorflow_that_only_feeds_data_starts_on_the_host_alone(backend, started, visible):
    """Under JAX or PyTorch kbert starts the TensorFlow it imports with the CPU only; the TensorFlow backend keeps
    the GPU, and a TensorFlow started elsewhere keeps its devices."""
    tf = types.SimpleNamespace(config=_TensorFlowConfig(started))
    _start_data_only_tensorflow(tf, backend)
    assert tf.config.get_visible_devices() == visible
    assert tf.config.started == (backend != "tensorflow" or started)
