# Two commands do all set-up on a fresh machine:  make demo  and  make test.
# torch is pinned here: an unpinned `torch` makes pip fetch a multi-GB CUDA build.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.edgeseq-installed
TORCH ?= torch==2.13.0

.PHONY: setup demo test bench clean firmware-tools services

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	@echo "installing edgeseq with its train, translate, pi and dev extras and $(TORCH) into $(VENV): a few minutes,"
	@echo "about 1.5 of them compiling the native step extension on 2 cores, a line per unit (pip's whole log: $(VENV)/pip-install.log)"
	@set -o pipefail; $(PY) -m pip install -v --disable-pip-version-check "$(TORCH)" -e ".[train,translate,pi,dev]" 2>&1 \
	  | tee $(VENV)/pip-install.log | { grep --line-buffered "edgeseq native: " || true; } | sed -u 's/^ *//' \
	  || { tail -n 40 $(VENV)/pip-install.log; echo "pip install failed; its whole log is $(VENV)/pip-install.log"; exit 1; }
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) examples/demo.py

test: setup firmware-tools services
	$(PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder

# The Cortex-M tests cross-compile the emitted C: install the compiler where apt can (as root);
# elsewhere those tests skip and say what is missing.
firmware-tools:
	@command -v arm-none-eabi-gcc >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends gcc-arm-none-eabi binutils-arm-none-eabi >/dev/null; } ; } || \
	  echo "note: arm-none-eabi-gcc not installed (apt-get install gcc-arm-none-eabi): the Cortex-M tests will skip"

# The MQTT, NATS and PostgreSQL tests start their own mosquitto, nats-server and PostgreSQL (`edgeseq tune`
# across machines) on free loopback ports: install them where apt can (as root); elsewhere those tests
# skip and say what is missing. Debian keeps PostgreSQL's initdb in /usr/lib/postgresql/<version>/bin.
services:
	@missing=""; for s in mosquitto nats-server postgresql; do b=$$s; [ $$s != postgresql ] || b=initdb; \
	  command -v $$b >/dev/null || [ -x /usr/sbin/$$b ] || ls /usr/lib/postgresql/*/bin/$$b >/dev/null 2>&1 || \
	  missing="$$missing $$s"; done; [ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing >/dev/null; } ; } || \
	  echo "note:$$missing not installed (apt-get install$$missing): the MQTT, NATS and PostgreSQL tests will skip"

bench: setup
	$(VENV)/bin/edgeseq bench --train

clean:
	rm -rf runs models .pytest_cache
