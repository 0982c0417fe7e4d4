# The two set-up commands (see README):
#   make run    - create the virtualenv if needed and run the broker on localhost:9092, data in ./data
#   make test   - create the virtualenv and test tools if needed and run the whole test suite
# Extra broker flags: make run ARGS="--override log.segment.bytes=1048576"

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PROMTOOL := .tools/prometheus/usr/bin/promtool
# The packages' bytecode, written once: with PYTHONDONTWRITEBYTECODE set (as on the
# development machines) every broker a test starts compiled them again, 0.4 s of
# its 1.2 s start; a stale .pyc is ignored by Python, never used.
PACKAGES := broker protocol storage config pipeline pyspark_kafka_compatible

.PHONY: run test bench tools venv test-containers bytecode

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py protocol/_recwalk.c protocol/_fastwire.c storage/_append.c storage/_cleaner.c broker/_produce.c broker/_lane.c broker/_metrics.c broker/_slots.h broker/_exc.h protocol/_pyint.h protocol/_mvslice.h
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Chronolog needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench,spark]' --config-settings editable_mode=compat
	touch $(STAMP)

bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 $(PACKAGES) >/dev/null

run: bytecode
	$(VENV)/bin/chronolog serve $(ARGS)

# kcat (Debian's, librdkafka 2.0) and kafkajs (npm, tests/js) are clients the integration
# tests drive; openssl makes their TLS certificates; PySpark (the kafka-compatible
# source's tests) needs a Java 17+ runtime; docker-compose (Debian's 1.29) and promtool
# (from Debian's prometheus package, unpacked into .tools/, no service installed) check
# the compose file and the alert rules.
tools:
	@{ command -v openssl >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openssl npm >/dev/null; }
	@test -d tests/js/node_modules/kafkajs || npm install --prefix tests/js --no-audit --no-fund --silent
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat >/dev/null; }
	@{ command -v java >/dev/null 2>&1 || ls -d /usr/lib/jvm/*/bin/java >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
	@command -v docker-compose >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq docker-compose >/dev/null; }
	@command -v promtool >/dev/null 2>&1 || test -x $(PROMTOOL) || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && mkdir -p .tools && cd .tools && apt-get download -qq prometheus 2>/dev/null \
	  && dpkg-deb -x prometheus_*.deb prometheus && rm -f prometheus_*.deb; }

# The suite runs in TEST_WORKERS processes (pytest-xdist), each test file whole in one of
# them (its module-scoped brokers start once); TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2

test: bytecode tools
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The end-to-end container check (README, "Running in containers"): images built,
# compose stack up, health check, tests service, host clients, Prometheus queries, clean
# stop and restart. Needs docker or podman (installed from Debian's packages if neither
# is there) and takes minutes: not part of `make test`.
test-containers: $(STAMP) tools
	$(PY) tests/containers/e2e.py

bench: $(STAMP)
	$(PY) bench/throughput.py $(ARGS)

# TLS cost: one broker's throughput over PLAINTEXT, SSL and SASL_SSL (bench/README.md)
.PHONY: bench-tls
bench-tls: $(STAMP)
	$(PY) bench/tls.py $(ARGS)

# Transactions: transactional against plain produce, read_committed against read_uncommitted (bench/README.md)
.PHONY: bench-transactions
bench-transactions: $(STAMP)
	$(PY) bench/transactions.py $(ARGS)

# Other shapes of work: small requests, many partitions, end-to-end latency (bench/shapes.py)
.PHONY: bench-shapes
bench-shapes: $(STAMP)
	$(PY) bench/shapes.py $(ARGS)

# The message codec alone: compiled runner against the generated Python (bench/codec.py)
.PHONY: bench-codec
bench-codec: $(STAMP)
	$(PY) bench/codec.py $(ARGS)

# Instructions per produce request under callgrind: steady where CPU time is noisy (bench/instructions.py)
.PHONY: bench-instructions
bench-instructions: $(STAMP)
	@command -v valgrind >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq valgrind >/dev/null; }
	$(PY) bench/instructions.py $(ARGS)

# More than one core: 1 vs 2 broker processes on disjoint topics (docs/DESIGN.md)
.PHONY: bench-multicore
bench-multicore: $(STAMP)
	$(PY) bench/multicore.py $(ARGS)

# Log compaction: cleaning throughput, peak memory, 10M keys in passes, latency while cleaning (bench/README.md)
.PHONY: bench-compaction
bench-compaction: $(STAMP)
	$(PY) bench/compaction.py $(ARGS)

# Log lifecycle: clean restart, unclean recovery, ListOffsets-by-time latency (bench/README.md)
.PHONY: bench-lifecycle
bench-lifecycle: $(STAMP)
	$(PY) bench/lifecycle.py $(ARGS)

# Example pipeline (README "Example pipeline"): per-key latency report over the last N minutes
#   make pipeline ARGS="--topic events --minutes 15 --output-topic events-latency --parquet out/latency.parquet"
.PHONY: pipeline
pipeline: $(STAMP)
	$(PY) -m pipeline.latency_report $(ARGS)
