# Vane — `make up` runs it, `make test` tests it. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

TEST_WORKERS ?= 2
# make test-fast: the engine, the statistics, and the API's domain services and validation on
# SQLite, with no other process, server or browser (under 3 minutes on two cores)
FAST_PATHS := tests/engine tests/analysis tests/control_plane tests/experiments tests/webhooks \
	tests/changes tests/client tests/relay tests/test_architecture.py
FAST_MARKS := not postgres and not redis and not e2e and not browser and not slow and not chaos

.PHONY: up test test-fast lint bench chaos clean

# the first run installs for a few minutes: say so, and let pip show what it fetches and builds
$(STAMP): pyproject.toml
	@echo "Installing Vane's dependencies into $(VENV) (first run or pyproject.toml changed: a few minutes)…"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --progress-bar on -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@
	@echo "Installed into $(VENV)."

up: $(STAMP)
	$(BIN)/vane up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# tests wait on databases and child processes: two pytest-xdist workers pay on two cores
test: lint
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

test-fast: $(STAMP)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup -m "$(FAST_MARKS)" $(FAST_PATHS)

chaos: $(STAMP)
	$(BIN)/pytest -m chaos -s

bench: $(STAMP)
	$(BIN)/python -m tests.benchmarks

clean:
	rm -rf $(VENV) .vane .pytest_cache .mypy_cache .ruff_cache
