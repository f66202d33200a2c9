# The two commands of the README. Both create .venv on a fresh machine.
# torch is installed first, pinned, so pip takes the local CPU wheel instead of a CUDA build.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/graphcost: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,xla,ray,tune]'
	touch $@

setup: $(BIN)/graphcost

demo: setup
	$(BIN)/graphcost demo --out runs/demo

# The report's page is checked in headless Chromium (Debian's package; apt needs root).
browser:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

test: setup browser
	$(BIN)/ruff check graphcost tests
	GRAPHCOST_STRICT_SKIPS=1 $(BIN)/python -m pytest

.PHONY: setup browser demo test
