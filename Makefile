# The two commands a newcomer runs (README): `make setup serve` and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install setup serve demo test test-faults test-slow

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# everything the main job needs: the environment, the real SmolLM2 target, the domain corpora and
# the embedded drafter pool (committed heads; datastores built from the corpora) in the cache
setup: install
	$(BIN)/hedgespec prepare
	$(BIN)/hedgespec data build
	$(BIN)/hedgespec zoo install

# the OpenAI-compatible Ray Serve application on http://127.0.0.1:8000 (Ctrl-C stops it)
serve: setup
	$(BIN)/serve run serve_config.yaml

# one in-process generation, no Ray
demo: setup
	$(BIN)/hedgespec generate --config configs/smollm2.yaml

test: install
	$(BIN)/pytest -q

# replicas of the real app (tiny models) killed mid-request, and sustained load: about 4 minutes
test-faults: install
	$(BIN)/pytest -q -m faults

# real SmolLM2 runs, registry builds, long benchmarks
test-slow: setup
	$(BIN)/pytest -q -m slow
