# rltrainer developer commands. Every target that needs the environment installs it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# The pinned CPU build first: an unpinned torch would pull several GB of CUDA wheels.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m rltrainer.demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check rltrainer tests bench
	$(BIN)/ruff format --check rltrainer tests bench

clean:
	rm -rf $(VENV) build *.egg-info
