# Two entry points: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-sqs faults lint typecheck java browser rabbitmq redis asyncapi bench docs clean test-minimums

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==0.13.8

$(STAMP): $(UV) pyproject.toml
	$(UV) pip install --quiet --python $(PY) -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/broker demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy broker   # strict (pyproject): the core, and through broker/backends and broker/contrib every backend and integration

# Spark needs Java 17+: install a headless JRE from Debian when none is on PATH.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "java not found: installing openjdk-17-jre-headless from Debian"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless; }

# The browser tests (the docs site's search box, the processor monitor page) drive Debian's Chromium.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "chromium not found: installing it from Debian"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

# The RabbitMQ suites start Debian's rabbitmq-server on loopback (never the system service).
rabbitmq:
	@command -v rabbitmq-server >/dev/null 2>&1 || test -x /usr/sbin/rabbitmq-server || { \
	  echo "rabbitmq-server not found: installing it from Debian"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env RUNLEVEL=1 apt-get install -y -qq rabbitmq-server; }

# The Redis suites start Debian's redis-server on loopback (never the system service).
redis:
	@command -v redis-server >/dev/null 2>&1 || test -x /usr/bin/redis-server || { \
	  echo "redis-server not found: installing it from Debian"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env RUNLEVEL=1 apt-get install -y -qq redis-server; }

# The AsyncAPI Initiative's parser checks the documents `broker asyncapi` writes (tests/unit/test_asyncapi.py):
# @asyncapi/parser from npm, pinned by tools/asyncapi/package-lock.json, run by the machine's Node (20+).
ASYNCAPI_PARSER := tools/asyncapi/node_modules/.installed

asyncapi: $(ASYNCAPI_PARSER)

$(ASYNCAPI_PARSER): tools/asyncapi/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
	  echo "npm not found: installing nodejs and npm from Debian"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nodejs npm; }
	cd tools/asyncapi && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

# Two workers: most of the suite waits on servers and deadlines (tests/conftest.py groups what shares one).
test: lint typecheck java browser rabbitmq redis asyncapi
	$(PY) -m pytest -n 2 --dist loadgroup

# The whole fault matrix (tests/faults, docs/reliability.md): every backend's real server paused and
# restarted under a workload; prints the backend x fault table. `make test` runs only its short subset.
faults: $(STAMP) rabbitmq redis
	POLYBROKER_FAULTS_SHAPE=3000@300 $(PY) -m pytest tests/faults -m faults --durations=15

# The whole SQS suite against the moto fake (a fake of SQS and SNS): `make test` leaves out its slowest
# tests (marked sqs_full, tests/conformance/test_sqs.py); this runs them with the rest of SQS's tests.
test-sqs: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup -m "sqs_full or not sqs_full" -k sqs --durations=15 \
	  tests/conformance/test_sqs.py tests/integration/sqs tests/integration/test_app_conformance.py tests/integration/sync

bench: $(STAMP) java
	$(PY) bench/run_all.py   # every bench/*.py as its docstring says; writes bench/RESULTS.md

# The unit and conformance suites with every SDK at the minimum pyproject.toml declares, in a venv of its own;
# the test tools, docs toolchain and test servers stay at their pins (docs/supported-versions.md).
VENV_MIN := .venv-minimums

test-minimums: $(UV) java browser rabbitmq redis
	$(UV) venv --quiet --clear --python $(PYTHON) $(VENV_MIN)
	$(PYTHON) tests/unit/test_supported_versions.py --overrides > $(VENV_MIN)/overrides.txt
	$(UV) pip install --quiet --python $(VENV_MIN)/bin/python --overrides $(VENV_MIN)/overrides.txt -e '.[test]'
	$(VENV_MIN)/bin/python tests/unit/test_supported_versions.py --check-installed
	$(VENV_MIN)/bin/python -m pytest tests/unit tests/conformance

docs: $(STAMP)
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:8000   # the documentation site (mkdocs.yml, docs/)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
