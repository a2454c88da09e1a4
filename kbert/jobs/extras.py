"""The optional packages a job needs, checked before it starts: a missing one is named in one line.

`pip install kbert[jax]` (or `[torch]`) installs no text pipeline: the
tokenizers, the `tf.data` input pipelines and the learning curve come with
the `text` extra. A job calls `require_packages` before it writes or trains
anything (`kbert pretrain` with its objective's `packages`), so that a run
does not train for its whole length and then stop
on an import.
"""

import importlib.util

# The import name of each package the jobs may need, and the name pip installs it by.
PIP_NAMES = {
    "tensorflow": "tensorflow",
    "tensorflow_text": "tensorflow-text",
    "matplotlib": "matplotlib",
    "keras_hub": "keras-hub",
    "tokenizers": "tokenizers",
    "onnx": "onnx",
    "onnxscript": "onnxscript",
    "safetensors": "safetensors",
}
# `kbert finetune`: the tokenizers and the tasks' `tf.data` pipelines.
FINETUNING_PACKAGES = ("tensorflow", "tensorflow_text")
# `kbert export`: what each format needs (the `export` extra brings them all).
EXPORT_PACKAGES = {"saved_model": ("tensorflow", "tensorflow_text"), "onnx": ("onnx", "onnxscript"),
                   "huggingface": ("safetensors",)}


def require_packages(modules, job, extra="text"):
    """Raise a `ValueError` naming the `modules` (import names) that are not installed, for `job`.

    The message also names the kbert `extra` that brings them.

    >>> require_packages(["json"], "--objective mlm")
    >>> require_packages(["json", "no_such_module"], "--objective mlm")
    Traceback (most recent call last):
    ...
    ValueError: --objective mlm needs no_such_module, which is not installed: pip install no_such_module \
(or pip install 'kbert[text]', the extra that brings every package kbert's jobs use).
    """
    missing = [module for module in modules if not _installed(module)]
    if missing:
        names = " ".join(PIP_NAMES.get(module, module) for module in missing)
        raise ValueError(
            f"{job} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed: "
            f"pip install {names} (or pip install 'kbert[{extra}]', the extra that brings every package "
            f"{_EXTRAS[extra]})."
        )


_EXTRAS = {"text": "kbert's jobs use", "export": "kbert export and kbert.to_huggingface use"}


def _installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False
