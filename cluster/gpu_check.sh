#!/usr/bin/env bash
# The vLLM-backend comparison on a GPU machine, in a few minutes: vLLM without speculation, vLLM's
# own n-gram speculation and HedgeSpec, each with 1, 2, 4, 8 and 16 concurrent streaming clients,
# greedy, the same engine settings (`hedgespec bench load`). Needs an NVIDIA GPU, Python 3.11+ and
# the package registry (it installs vLLM's CUDA build into its own venv, .venv-gpu).
#
#   bash cluster/gpu_check.sh [MODEL]      # MODEL: a Llama-family Hugging Face folder, or smollm2 (default)
#
# Writes out/gpu-check/{serve-gpu-vllm.yaml,load.json,load.png} and prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-smollm2}
out=${OUT_DIR:-out/gpu-check}
venv=.venv-gpu
nvidia-smi -L
mkdir -p "$out"
[ -x $venv/bin/python ] || python3 -m venv $venv
$venv/bin/pip install -q --upgrade pip
$venv/bin/pip install -q -e '.[test,vllm]'
$venv/bin/python -c "import vllm, torch; assert torch.cuda.is_available(); print('vllm', vllm.__version__, torch.cuda.get_device_name())"
if [ "$model" = smollm2 ]; then $venv/bin/hedgespec prepare; fi
# the datastores need the corpora (`hedgespec data build`, `zoo install`): take them where they are built
kinds=prompt_lookup
if $venv/bin/hedgespec data build >/dev/null 2>&1 && $venv/bin/hedgespec zoo install >/dev/null 2>&1; then
    kinds=prompt_lookup,datastore
fi
$venv/bin/python - "$model" "$kinds" "$out/serve-gpu-vllm.yaml" <<'PY'
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
$venv/bin/hedgespec bench load --config "$out/serve-gpu-vllm.yaml" --clients 1,2,4,8,16 --requests 4 \
    --max-tokens 128 --json "$out/load.json" --plot "$out/load.png"
