# rltrainer developer commands. Every target that needs the environment installs it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean crds

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# The pinned CPU build first: an unpinned torch would pull several GB of CUDA wheels.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev]"
	touch $(STAMP)

DEMO_DIR := .demo_results

# Train PPO on CartPole-v1 until solved (tuned example), checkpoint, evaluate the checkpoint.
demo: $(STAMP)
	rm -rf $(DEMO_DIR)
	$(BIN)/rltrainer train file tuned_examples/ppo_cartpole.yaml --checkpoint-at-end \
		--storage-path $(DEMO_DIR) --name demo
	$(BIN)/rltrainer evaluate "$$(ls -d $(DEMO_DIR)/demo/*/checkpoint_* | tail -n 1)" --episodes 20

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check rltrainer tests bench
	$(BIN)/ruff format --check rltrainer tests bench

# The RLExperiment CRD in crds/, generated from operator/rltrainer_operator/models.py.
crds: $(STAMP)
	$(BIN)/python -m rltrainer_operator.crd

clean:
	rm -rf $(VENV) build *.egg-info $(DEMO_DIR)
