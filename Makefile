# optical-tcp-testbed: `make run` and `make test` do all set-up themselves.
SHELL := /bin/bash
.DELETE_ON_ERROR:
.PHONY: setup build ebpf kernel test test-all test-unit test-bpf test-native test-guest run bench \
        reproduce-e1 clean distclean help

VENV    := .venv
PY      := $(VENV)/bin/python
TESTBED := $(VENV)/bin/testbed
PYTEST  := $(PY) -m pytest
# Options for the full-kernel guest (see `testbed guest --help`).
GUEST_OPTS ?=

help:
	@echo "make run    - set up, build, run the main demo (E1, about 4 min under icount), print where its report is"
	@echo "make test   - set up, build, run all test tiers (unit, BPF, native, guest without the long guest tests)"
	@echo "make test-all - the same with the long guest tests (study-like runs; hours under TCG)"
	@echo "make reproduce-e1 - the paper's E1 sweep at k = 4, files x 1 % (very long: ~170 hours on 2 cores; docs/e1.md has a findings subset)"
	@echo "make bench  - benchmarks (all areas; AREAS="switch traffic" for some)"
	@echo "make setup  - idempotent set-up only (apt, venv, pinned pip, builds)"
	@echo "make clean  - remove leftovers of killed runs (testbed clean)"

setup:
	@setup/setup.sh
	@$(MAKE) --no-print-directory build

build: ebpf kernel

ebpf:
	@$(MAKE) --no-print-directory -C ebpf

kernel:
	@$(MAKE) --no-print-directory -C kernel

test: setup
	@tests/run-tiers.sh

# Every tier with the long guest tests too (study-like runs; well over CI's budget).
test-all: setup
	@TESTBED_LONG_TESTS=1 tests/run-tiers.sh

test-unit: setup
	$(PYTEST) tests/unit

test-bpf: setup
	$(PYTEST) tests/bpf

test-native: setup
	$(PYTEST) tests/native

test-guest: setup
	$(TESTBED) guest $(GUEST_OPTS) -- $(PY) -m pytest tests/guest

run: setup
	@$(TESTBED) run e1-demo

# The paper's E1 sweep at k = 4 (~170 hours on 2 cores, estimated; see experiments/e1-paper.toml).
reproduce-e1: setup
	@$(TESTBED) run e1-paper

bench: setup
	@$(PY) -m testbed.benchmarks $(AREAS)

clean:
	@if [ -x $(TESTBED) ]; then $(TESTBED) clean; else echo "nothing set up yet"; fi

distclean: clean
	$(MAKE) -C ebpf clean
	$(MAKE) -C kernel clean
	rm -rf $(VENV) *.egg-info
