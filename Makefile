# Each target creates .venv when missing and installs the project into it, saying what it does.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_INSTALL := $(PY) -m pip install --progress-bar on
# PYTEST_WORKERS=2 runs the suite in two pytest processes (pytest-xdist), a test file's tests
# all in the same process (--dist loadfile: module-scoped clusters start once, and a file's
# tests never race each other for its fixed resources), files handed out in collection order
# (--no-loadscope-reorder: xdist's default, most tests first, leaves tests/cluster's few-test,
# slow process files to the end). Off by default: on the shared, loaded 2-core container it
# measured 8-24 % slower than one process (bench/RESULTS.md, 2026-12-05); an idle machine
# with cores to spare is where it may pay.
PYTEST_WORKERS ?= 0
PYTEST_XDIST := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# Bytecode for the project's own packages before a target runs them: an environment that sets
# PYTHONDONTWRITEBYTECODE (as some containers do) makes every process compile them again, about
# half the CPU of `import asyncflow` in each of the many worker processes the suite starts
# (bench/RESULTS.md, 2026-12-05). compileall writes it whatever that variable says, and only
# for modules changed since.
BYTECODE := $(PY) -m compileall -q -j 0 asyncflow transports

.PHONY: demo test test-gpu bench clean

$(STAMP): pyproject.toml
	@if test -x $(PY); then echo "==> using the virtual environment $(VENV)"; \
	else echo "==> creating the virtual environment $(VENV) with $(PYTHON) (about 15 s)"; \
	     $(PYTHON) -m venv $(VENV); fi
	@echo "==> upgrading pip in $(VENV)"
	$(PIP_INSTALL) --upgrade pip
	@echo "==> installing asyncflow (editable) with its dev and demos extras into $(VENV)"
	@echo "    (two minutes or so on a fresh clone: pip reports each download, then installs"
	@echo "    them all in one step that prints nothing for about a minute)"
	$(PIP_INSTALL) -e '.[dev,demos]'
	@touch $(STAMP)
	@echo "==> $(VENV) is ready"

demo: $(STAMP)
	@echo "==> running demos/train_digits.py: trains an MLP on scikit-learn's digits, saves and restores it"
	@$(BYTECODE) >/dev/null
	$(PY) demos/train_digits.py

test: $(STAMP)
	@echo "==> running the test suite (pytest, including the docs check tests/test_docs.py)"
	@$(BYTECODE) >/dev/null
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_XDIST) $(PYTEST_ARGS)

# The suite again as on a machine with a GPU: tests/fake_gpu on PYTHONPATH makes `import cupy`
# find the strict fake CuPy (tests/exec/fake_cupy.py) with one device, in this process and
# in every worker process it starts, so default placement chooses GPU:0 as on a user's GPU
# machine. Tests that run the same without a GPU are left to `make test` (tests/conftest.py).
test-gpu: $(STAMP)
	@echo "==> running the test suite with a fake GPU visible (strict fake CuPy; see tests/fake_gpu)"
	@$(BYTECODE) >/dev/null
	PYTHONPATH=tests/fake_gpu ASYNCFLOW_FAKE_GPU=1 $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_XDIST) $(PYTEST_ARGS)

bench: $(STAMP)
	@echo "==> running the benchmarks (bench/run_all.py; results in bench/RESULTS.md)"
	@$(BYTECODE) >/dev/null
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
