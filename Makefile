# The two set-up commands: `make demo` and `make test`. Both create .venv on first use and install what they
# need: the demo the package with its experiments extra, the tests (and the lint) the dev extra on top (pytest,
# ruff, mypy, Triton for the kernel's CPU-interpreter tests). Later runs reuse it; a stamp file per extra is
# rebuilt when pyproject.toml changes, and installing dev also satisfies the demo's.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
EXPERIMENTS := $(VENV)/.onlstm-experiments
DEV := $(VENV)/.onlstm-dev

.PHONY: install demo test lint format bench clean

install: $(DEV)

$(EXPERIMENTS): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[experiments]"
	@touch $@

$(DEV): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"   # dev includes the experiments extra: everything
	@touch $@ $(EXPERIMENTS)

demo: $(EXPERIMENTS)
	$(BIN)/onlstm demo

test: $(DEV)
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --durations=15  # the slowest 15: the suite must stay under 10 minutes

# Lint: ruff (rules and format) over the whole tree, mypy over the layer (configured in pyproject.toml).
lint: $(DEV)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy

format: $(DEV)
	$(BIN)/ruff check --fix src tests benchmarks examples
	$(BIN)/ruff format src tests benchmarks examples

bench: $(DEV)
	$(BIN)/python benchmarks/layer_speed.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
