# The two commands of the README: `make run` (the main job) and `make test`
# (the whole suite on TensorFlow, JAX and PyTorch). Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
BACKEND ?= jax
PY := $(VENV)/bin/python

.PHONY: setup run test lint benchmark

setup: $(VENV)/.installed

# torch first, by pip and exactly 2.13.0: that CPU wheel is on the machine (pip's
# configuration points at it), while any other spec (or a package pulling torch in)
# fetches a multi-GB CUDA build. Then the rest with uv, which finds torch installed
# and downloads in parallel: 69 s for everything instead of pip's 135 s, empty caches.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip uv
	$(PY) -m pip install -q torch==2.13.0
	$(VENV)/bin/uv pip install -q --python $(PY) -e ".[torch,tensorflow,jax,text,hf,dev]"
	touch $@

run: setup
	KERAS_BACKEND=$(BACKEND) $(VENV)/bin/kbert pretrain $(ARGS)

test: setup
	bash scripts/test.sh

# The style check (its rules: [tool.ruff] in pyproject.toml).
lint: setup
	$(VENV)/bin/ruff check kbert tests examples benchmarks

# Every script in benchmarks/: the per-backend ones once per backend, the others
# (which start one process per backend themselves) once. Tables go to benchmarks/results/.
PER_BACKEND_BENCHMARKS := encoder_throughput finetuning long_attention
benchmark: setup
	for script in $(PER_BACKEND_BENCHMARKS); do \
		for backend in tensorflow jax torch; do \
			KERAS_BACKEND=$$backend $(PY) benchmarks/$$script.py || exit 1; \
		done; \
	done
	$(PY) benchmarks/generation.py
	$(PY) benchmarks/text_throughput.py
	KERAS_BACKEND=$(BACKEND) $(PY) benchmarks/pretraining_pipeline.py
