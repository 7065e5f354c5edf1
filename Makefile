# trajforge — `make run` runs the end-to-end job on the embedded CPU model; `make test` runs
# the whole test suite. Both create .venv and install what they need on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-12)
ARGS   ?=
PYTEST_ARGS ?=

export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_LOGGING_LEVEL ?= WARNING
export HF_HUB_OFFLINE ?= 1

.PHONY: run test install model lint bench clean sysdeps

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[local,train,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

model: install
	$(VENV)/bin/trajforge prepare-model

run: model
	$(VENV)/bin/trajforge run $(ARGS)

# System packages the tests use: bubblewrap (the sandbox) and chromium (renders the run
# report). Installed with apt when missing and we are root; otherwise those tests skip
# with a reason.
sysdeps:
	@for pair in bwrap:bubblewrap chromium:chromium; do \
	  cmd=$${pair%%:*}; pkg=$${pair#*:}; \
	  command -v $$cmd >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq $$pkg >/dev/null) || echo "could not install $$pkg"; \
	  else echo "note: $$pkg is not installed (tests that need it will skip)"; fi; \
	done

test: model sysdeps
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf out .pytest_cache .ruff_cache
