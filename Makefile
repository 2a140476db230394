# The two set-up commands: `make demo` and `make test`. Both create .venv and install what they
# need on first use; later runs reuse it (the stamp file is rebuilt only when pyproject.toml changes).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.onlstm-installed

.PHONY: install demo test lint format bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"   # dev includes the experiments extra: everything
	@touch $@

demo: $(STAMP)
	$(BIN)/onlstm demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Lint: ruff (rules and format) over the whole tree, mypy over the layer (configured in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix src tests benchmarks examples
	$(BIN)/ruff format src tests benchmarks examples

bench: $(STAMP)
	$(BIN)/python benchmarks/layer_speed.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
