# faultday — every target does its own set-up on a fresh Debian machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTEST := $(VENV)/bin/pytest
PYTHON ?= python3
STAMP := $(VENV)/.installed
# pytest exit code 5 = "no tests collected": not a failure of the target.
PYTEST_OK = rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; exit $$rc

.PHONY: demo test test-slow test-scenarios test-real test-docker images image-vllm bench lint gameday setup sysdeps native clean

NATIVE_SRC := src/faultday/proxy/relay.c
NATIVE := src/faultday/proxy/_relay.so

sysdeps:  ## Debian packages: redis-server (needed); chromium (the report's browser test), gcc (the proxy's native relay)
	@need=""; want=""; \
	command -v redis-server >/dev/null || need="$$need redis-server"; \
	command -v chromium >/dev/null || want="$$want chromium"; \
	command -v cc >/dev/null || want="$$want gcc libc6-dev"; \
	if [ "$$(id -u)" = 0 ] && [ -n "$$need$$want" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need $$want; \
	elif [ -n "$$need" ]; then echo "please install:$$need (sudo apt-get install$$need)"; exit 1; \
	elif [ -n "$$want" ]; then echo "note: without$$want: no browser test of the report / the proxy relays in Python"; \
	fi

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	@touch $(STAMP)

setup: sysdeps $(STAMP) native  ## everything the demo and the tests need

native: $(STAMP)  ## the proxy's native relay (relay.c), rebuilt when its source changed
	@if [ ! $(NATIVE) -nt $(NATIVE_SRC) ]; then \
	  if command -v cc >/dev/null; then cc -O2 -Wall -shared -fPIC -pthread -o $(NATIVE) $(NATIVE_SRC); \
	  else echo "note: no C compiler: the proxy relays in Python (slower)"; fi; \
	fi

demo: setup  ## a short, real game day on the local stack; prints where the report is
	$(VENV)/bin/faultday gameday scenarios/ --tag demo --time-scale 0.25

gameday: setup  ## the whole quarterly suite at full length
	$(VENV)/bin/faultday gameday scenarios/

test: setup  ## the default suite (CI runs it)
	$(PYTEST) -q -m "not slow and not real and not docker" -p no:cacheprovider --durations=15; $(PYTEST_OK)

test-slow: setup  ## heavier checks (CI runs them too)
	$(PYTEST) -q -m "slow and not real and not docker" -p no:cacheprovider; $(PYTEST_OK)

test-scenarios: setup  ## the scenario library, time-scaled, on the local stack (CI runs it)
	$(PYTEST) -q -p no:cacheprovider scenarios/ --faultday-time-scale 0.1 --faultday-report-dir reports/ci; $(PYTEST_OK)

test-real: setup  ## real vLLM on CPU in its own virtualenv (CI runs it)
	@if [ -x scripts/setup-real-venv.sh ] || [ -f scripts/setup-real-venv.sh ]; then bash scripts/setup-real-venv.sh; fi
	FAULTDAY_REAL_REQUIRED=1 $(PYTEST) -q -m real -p no:cacheprovider tests/real; $(PYTEST_OK)

images: setup  ## faultday's image (docker-build/); FAULTDAY_OFFLINE=1: from a Debian base built here
	docker-build/build-images.sh

image-vllm: setup  ## real vLLM on CPU with the tiny model (the docker-real profile's LLM; test-docker needs it)
	docker-build/build-vllm-image.sh

# A missing engine or image fails here (it only skips in a plain pytest run); build the
# images first (`make images image-vllm`: CI builds them once per run).
test-docker: setup  ## the docker driver, its faults, compose, four library scenarios, GPU faults on vLLM in a container
	FAULTDAY_DOCKER_REQUIRED=1 $(PYTEST) -q -m docker -p no:cacheprovider tests/docker_engine

bench: setup  ## benchmarks, each comparing against its baseline in one run; figures in bench/RESULTS.md
	$(PY) bench/proxy/bench_proxy.py
	$(PY) bench/proxy/bench_proxy_tracing.py
	$(PY) bench/tracing/bench_tracing.py
	$(PY) bench/llmsim/bench_streams.py --requests 256 --ramp 2 --max-tokens 256
	$(PY) bench/stack/bench_stack.py --cycles 3 --docker
	$(PY) bench/load/bench_load.py --users 32 --workers 0 --seconds 15

lint: setup
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports  # the layer contracts in .importlinter (docs/architecture.md)

clean:
	rm -rf reports .pytest_cache .mypy_cache .ruff_cache
