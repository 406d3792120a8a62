# Two commands do all set-up on a fresh machine:  make demo  and  make test.
# torch is pinned here: an unpinned `torch` makes pip fetch a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.edgeseq-installed
TORCH ?= torch==2.13.0

.PHONY: setup demo test bench clean

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH)" -e ".[train,translate,pi,dev]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest

bench: setup
	$(VENV)/bin/edgeseq bench --train

clean:
	rm -rf runs models .pytest_cache
