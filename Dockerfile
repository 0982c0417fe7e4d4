# Chronolog broker image (see README, "Running in containers").
#   docker build -t chronolog .                      # the broker (the last stage, "broker")
#   docker build --target tests -t chronolog-tests .  # + test tools and the test suite
#   docker build --build-arg BASE_IMAGE=my-python:3.11 -t chronolog .  # another base image
# (Python 3.11+ with pip and apt-get: the default, or a local one where no registry is reachable)
ARG BASE_IMAGE=python:3.11-slim

# Chronolog installed, and its non-root user: what both images share. No volume, no
# health check and no entry point here; those are the broker's.
FROM ${BASE_IMAGE} AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/chronolog
COPY pyproject.toml setup.py README.md ./
COPY protocol ./protocol
COPY storage ./storage
COPY config ./config
COPY broker ./broker
# gcc only for the install: it compiles the record walker (protocol/_recwalk.c), the
# message codec's runner (protocol/_fastwire.c), the common append (storage/_append.c),
# the produce handler's loop (broker/_produce.c) and the cleaner's loops
# (storage/_cleaner.c); python3-dev too when the base image's Python has no headers
# (Debian's python3, unlike the python images)
RUN dev=$(python3 -c 'import os, sysconfig; print("" if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else "python3-dev")') \
 && apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev $dev \
 && pip install . \
 && python3 -c 'import chronolog.protocol._recwalk, chronolog.protocol._fastwire, chronolog.storage._append, chronolog.storage._cleaner, chronolog.broker._produce' \
 && apt-get purge -y --auto-remove gcc libc6-dev $dev \
 && rm -rf /var/lib/apt/lists/*

# A fixed non-root uid/gid, owner of the data volume.
RUN groupadd --system --gid 10001 chronolog \
 && useradd --system --uid 10001 --gid chronolog --home-dir /data --no-create-home --shell /usr/sbin/nologin chronolog \
 && mkdir -p /data \
 && chown chronolog:chronolog /data
USER chronolog:chronolog


# The integration test runner (docker compose "tests" service): the test extra, kcat and
# the test suite on top of the installed broker, as the same non-root user. It runs no
# broker of its own: no volume, no health check.
FROM base AS tests
USER root
RUN dev=$(python3 -c 'import os, sysconfig; print("" if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else "python3-dev")') \
 && apt-get update \
 && apt-get install -y --no-install-recommends kcat gcc libc6-dev $dev \
 && pip install '.[test]' \
 && python3 setup.py -q build_ext --inplace \
 && apt-get purge -y --auto-remove gcc libc6-dev $dev \
 && rm -rf /var/lib/apt/lists/*
COPY tests ./tests
RUN chown -R chronolog:chronolog /opt/chronolog
USER chronolog:chronolog
ENV HOME=/tmp
CMD ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", \
     "tests/integration/test_roundtrip.py", \
     "tests/integration/test_offsets_for_times.py", \
     "tests/integration/test_log_append_time.py"]


# The broker: the last stage, so that a plain `docker build .` gives it.
FROM base AS broker
# Configuration through CHRONOLOG_<PROPERTY> variables (or --config / --override args):
# listen on every interface, keep the log in the volume, serve /metrics on 9404.
# CHRONOLOG_ADVERTISED_LISTENERS is what clients are told to connect to: set it to an
# address they can reach (docker run -e CHRONOLOG_ADVERTISED_LISTENERS=PLAINTEXT://myhost:9092).
ENV CHRONOLOG_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    CHRONOLOG_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092 \
    CHRONOLOG_LOG_DIRS=/data \
    CHRONOLOG_METRICS_PORT=9404

VOLUME ["/data"]
EXPOSE 9092 9404

# One ApiVersions round trip over the Kafka protocol: exit 0 healthy, 1 not.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["chronolog", "healthcheck", "--quiet", "--bootstrap-server", "127.0.0.1:9092", "--timeout", "4"]

# SIGTERM: controlled shutdown, bounded by controlled.shutdown.timeout.ms (default 8 s,
# under docker stop's default 10 s grace period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["chronolog"]
CMD ["serve"]
