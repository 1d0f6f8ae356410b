# Two commands on a fresh machine: `make demo` and `make test`.
# Re-running either is quick: the venv is rebuilt only when the pins change.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Each test run gets its own DDS domain unless the caller chose one.
ROS_DOMAIN_ID ?= $(shell echo $$(( $$$$ % 200 + 10 )))

export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export ROS_DOMAIN_ID

.PHONY: install test test-fast demo lint format docs docs-check bench clean

install: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip wheel setuptools
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The tests that start no ROS processes run on TEST_WORKERS pytest-xdist workers (a file
# per worker at a time, so a module's exported programs are built once); the `ros` tier
# runs after them, alone, since its graphs run in real time.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not ros" test
	$(BIN)/python -m pytest -q -m ros test

# The suite without the slow tier (training, long evaluations, real processes):
# what a developer runs between changes; `make test` (CI) runs everything.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not ros" test

demo: $(STAMP)
	$(BIN)/vla-edge demo

# lint-imports: which layer of vla_edge/ may import which (the contract in .importlinter)
lint: $(STAMP)
	$(BIN)/ruff check vla_edge test launch tools setup.py
	$(BIN)/ruff format --check vla_edge test launch tools setup.py
	$(BIN)/lint-imports --config .importlinter --no-cache

# docs/RESULTS.md's tables and README.md's generated blocks, from their JSONs and the code
# (a docs tool, outside the package); docs-check rewrites nothing and fails on a stale one.
docs: $(STAMP)
	$(BIN)/python tools/report.py

docs-check: $(STAMP)
	$(BIN)/python tools/report.py --check

format: $(STAMP)
	$(BIN)/ruff format vla_edge test launch tools setup.py
	$(BIN)/ruff check --fix vla_edge test launch tools setup.py

clean:
	rm -rf $(VENV) build *.egg-info
