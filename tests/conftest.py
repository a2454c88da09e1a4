"""Test set-up shared by every test: quiet TensorFlow, a fixed seed, float32; the vocabulary fixtures.

Two things keep the suite's three runs (one per backend) short:
- XLA compiles every eager JAX operation, and every compiled TensorFlow or JAX
  step, once per shape; with the tests' tiny models most of the time goes to
  compiling, not running. `FAST_COMPILE` turns off XLA's expensive CPU
  optimization passes (a tiny BigBird's first eager forward on JAX: about 30%
  less time) and its MLIR fusion emitters for the older LLVM ones, which
  compile a small program in about half the time (Longformer's and BART's
  test files on JAX, cold cache: 97 s -> 69 s; TensorFlow's XLA objectives in
  a strategy scope: 80 s -> 59 s). The tests compare outputs with tolerances,
  which neither changes.
- A test marked `@pytest.mark.backend_independent` (it does the same thing on
  every backend: reads files, parses code, starts a job that stops before Keras
  computes anything) runs in one run only, `independent_run`'s: PyTorch's for
  `ON_PYTORCH`'s files, whose tests run Keras models (eager PyTorch runs a tiny
  model's few steps without compiling; on JAX every new shape compiles: the
  docstring examples took 236 s on JAX, 34 s on PyTorch), the JAX run's for the
  others (readers, tokenizers, `tf.data` pipelines, lint, docs), since the JAX
  run is two processes and ends first.

A test marked `@pytest.mark.rotated(reason)` (a learning check: a few steps lower the loss) runs in one
backend's run, picked from its test id by `rotation_backend` (a fixed rotation, so that a failure
reproduces; `KBERT_ROTATION=all` runs it on every backend): the check is of the objective and the
recipe, and every backend still meets a share of them; each backend's training step itself is
checked on every backend by the harnesses' `fit_step`. What rotates (these tests, the every-door
matrix, the portability matrix's saves) is shared by `ROTATION`'s slots: half for PyTorch, which
runs them without compiling, a quarter each for TensorFlow and JAX.

`KBERT_TEST_SHARD=k/n` keeps the test files of shard k of n (the sorted
files, every n-th from the k-th), so that `scripts/test.sh` can run the
slowest backend's suite as two processes; a fixed split, so a failure
reproduces with the same shard. The files of `SPLIT_BY_TEST` (each test a
whole job or program, with no fixture worth building once) are split by
test instead: their tests alternate between the shards.

A test marked `@pytest.mark.fast_paths_both_ways` (a parity check) runs twice
on PyTorch, with `kbert.backend.fast_paths` on and off (ids `[fast_paths_on]`,
`[fast_paths_off]`); the other backends have no fast paths and run it once.
"""

import contextlib
import functools
import importlib.util
import os
import signal
import zlib

FAST_COMPILE = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
                " --xla_cpu_use_fusion_emitters=false")
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()
# JAX's persistent compilation cache, for every compiled program however small (each eager
# operation is one): the JAX run's two processes, and the JAX processes tests start, reuse
# each other's compilations (the cache key holds the program, the shapes and XLA_FLAGS). No size
# limit: JAX's eviction scans the folder at every write; delete the folder at will.
JAX_CACHE = {
    "JAX_COMPILATION_CACHE_DIR": os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                              ".jax-cache"),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}
for _name, _value in JAX_CACHE.items():
    os.environ.setdefault(_name, _value)

import kbert  # noqa: E402, F401  (first of kbert: imports Keras with TensorFlow's start-up lines silenced)
import keras  # noqa: E402
import pytest  # noqa: E402

from kbert.backend import fast_paths  # noqa: E402
from kbert.backend.imports import quiet_import  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# The files (or folders) whose backend-independent tests run Keras models, and
# test_rotation.py, which reads the whole session's tests (the JAX run is sharded).
ON_PYTORCH = ("jobs", "test_doctests.py", "test_readme.py", "test_rotation.py", "analysis/test_head_pruning.py")
BACKENDS = ("tensorflow", "jax", "torch")
# What rotates takes these slots in turn (any four in a row hold every backend). PyTorch takes half:
# it runs a tiny model's few steps without compiling (a learning check: 1-6 s, against 10-40 s on
# TensorFlow and JAX, which compile the step), and TensorFlow's run is the suite's longest. With
# JAX taking half instead (its run is two processes), the suite took longer: JAX compiles each door.
ROTATION = ("tensorflow", "torch", "jax", "torch")
# The two largest files of JAX's run, split by test between its shards (their tests took 281 s and
# 247 s of one shard's 1,845 s, which then ended 685 s after the other).
SPLIT_BY_TEST = ("test_every_door.py", "jobs/test_distributed_runs.py")

# `keras.utils.set_random_seed` also seeds TensorFlow whenever it is installed,
# importing it on every backend; import it here with its start-up lines kept
# quiet. (tests/test_import.py checks, in a fresh process, that kbert itself
# never imports TensorFlow under JAX or PyTorch.)
if importlib.util.find_spec("tensorflow") is not None:
    quiet_import("tensorflow")


def pytest_configure(config):
    config.addinivalue_line("markers", "backend_independent: the test runs in one backend's run only")
    config.addinivalue_line("markers", "fast_paths_both_ways: on PyTorch, run with the fast paths on and off")
    config.addinivalue_line("markers", "rotated(reason): the test runs in one backend's run, by a fixed rotation")
    config.addinivalue_line("markers", "slow(reason): the test takes over 20 s on a backend; the reason says why "
                            "(it still runs in `make test`)")


def pytest_generate_tests(metafunc):
    if keras.backend.backend() == "torch" and metafunc.definition.get_closest_marker("fast_paths_both_ways"):
        metafunc.fixturenames.append("fast_paths")
        metafunc.parametrize("fast_paths", ["fast_paths_on", "fast_paths_off"])


@pytest.fixture(autouse=True)
def _fast_paths_switch(request):
    """The PyTorch fast paths switched as a `fast_paths_both_ways` test's parameter says (see above)."""
    callspec = getattr(request.node, "callspec", None)
    setting = callspec.params.get("fast_paths") if callspec else None
    with fast_paths.switched(setting != "fast_paths_off") if setting else contextlib.nullcontext():
        yield


def _shard(items, shard):
    """The items of the test files of `shard` ("k/n", k from 1) and its share of `SPLIT_BY_TEST`'s tests,
    and the others."""
    try:
        k, n = (int(part) for part in shard.split("/"))
        assert 1 <= k <= n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"KBERT_TEST_SHARD must be k/n with 1 <= k <= n; received {shard!r}.") from None
    files = sorted({item.path for item in items if _relative(item.path) not in SPLIT_BY_TEST})
    kept = {item.nodeid for item in items if item.path in set(files[k - 1 :: n])}
    for path in {item.path for item in items} - set(files):  # SPLIT_BY_TEST's: every n-th test
        kept |= {item.nodeid for item in [item for item in items if item.path == path][k - 1 :: n]}
    return [item for item in items if item.nodeid in kept], [item for item in items if item.nodeid not in kept]


def _relative(path):
    """`path` relative to tests/, with forward slashes."""
    return os.path.relpath(os.path.abspath(path), HERE).replace(os.sep, "/")


def independent_run(path):
    """The backend whose run runs the `backend_independent` tests of the test file `path`."""
    relative = _relative(path)
    return "torch" if any(relative == name or relative.startswith(name + "/") for name in ON_PYTORCH) else "jax"


def rotation_backend(nodeid):
    """The backend whose run runs the `rotated` test `nodeid` (its path and name, parameters included)."""
    return ROTATION[zlib.crc32(nodeid.encode()) % len(ROTATION)]


def pytest_collection_modifyitems(config, items):
    shard = os.environ.get("KBERT_TEST_SHARD")
    if shard:
        items[:], deselected = _shard(items, shard)
        config.hook.pytest_deselected(items=deselected)
    for item in items:
        slow = item.get_closest_marker("slow")
        if slow:  # for scripts/test_durations.py, through the JUnit report
            item.user_properties.append(("slow", slow.kwargs.get("reason") or "; ".join(slow.args)))
        independent = independent_run(item.path)
        if keras.backend.backend() != independent and item.get_closest_marker("backend_independent"):
            item.add_marker(pytest.mark.skip(reason=f"backend-independent: runs in the {independent} run of the suite"))
        if item.get_closest_marker("rotated") and os.environ.get("KBERT_ROTATION") != "all":
            backend = rotation_backend(item.nodeid)
            if backend != keras.backend.backend():
                item.add_marker(pytest.mark.skip(reason=f"rotated: runs in the {backend} run of the suite"))


@pytest.fixture(autouse=True)
def _reset_keras_state():
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)


@pytest.fixture(scope="session", autouse=True)
def _word_piece_vocabularies_learned_once():
    """Jobs learn each corpus's WordPiece vocabulary once per run of the suite.

    Every `kbert pretrain` of the job tests and the every-door matrix learns
    the vocabulary of the same forty documents again (seconds each); the
    learner itself is tests/text/test_word_piece_vocabulary.py's, which
    imports it before this takes effect. Lists of texts are remembered;
    other inputs (generators, datasets) are learned each time.
    """
    import kbert.text

    learn = kbert.text.learn_word_piece_vocabulary

    @functools.cache
    def learned(texts, vocabulary_size, *args, **kwargs):
        return tuple(learn(list(texts), vocabulary_size, *args, **kwargs))

    def remembered(texts, vocabulary_size, *args, **kwargs):
        if not isinstance(texts, list | tuple):
            return learn(texts, vocabulary_size, *args, **kwargs)
        return list(learned(tuple(texts), vocabulary_size, *args, **kwargs))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kbert.text, "learn_word_piece_vocabulary", remembered)
        yield


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt during the test, as in a terminal.

    `scripts/test.sh` starts each run as a background job, which starts with
    SIGINT ignored (and kbert's runs keep an ignored signal ignored).
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """Forty documents of `kbert pretrain`'s default corpus, one file, documents separated by blank lines."""
    from kbert.jobs.pretraining_run import default_corpus

    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n\n".join(default_corpus()[:40]), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def vocab_path(request, tmp_path_factory):
    """A vocab.txt of the test module's `VOCABULARY` (for kbert's and Hugging Face's tokenizers)."""
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in request.module.VOCABULARY), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(vocab_path):
    """A `kbert.text.WordPieceTokenizer` on `vocab_path`."""
    from kbert.text import WordPieceTokenizer

    return WordPieceTokenizer(vocab_path)
