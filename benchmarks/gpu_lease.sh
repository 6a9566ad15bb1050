#!/usr/bin/env bash
# The checks of a short lease of a GPU machine (docs/speed.md), each under a time limit, in
# steps that one or two calls of a few minutes hold:
#   tests   the GPU tests (tests/gpu), beside the next step's start-up
#   train   the base model at WMT14's batch for TRAIN_SECONDS (benchmarks/train_scale.py)
#   big     the big model at 10,240 tokens a batch, as NVIDIA's fairseq-derived figures
#   decode  decoding speed of a trained model on the GPU (decode_speed.py --part 1)
#   shapes  the same at the tiny and base shapes (SHAPES), random weights (decode_speed.py --part 2)
#   graphs  a decoder step launched against the same step replayed from a CUDA graph
#           (cuda_graph_step.py, float32 and bf16)
# STEPS picks them (default: all; on an H200, "tests train big" took ~8 minutes with
# TRAIN_SECONDS=240 and "decode shapes" ~4); results go to OUT_DIR (default $OUT, else gpu-lease/).
#
# The GPU machine may reach no network: prepare gpu/ beforehand, on any machine with pip's
# registry, in the repository (gpu/ goes in .git/info/exclude and is carried to the machine):
#   STEPS=prepare FROM=runs/m30k-serve SRC_FROM=../shared/data/multi30k/test_2016_flickr.en \
#     benchmarks/gpu_lease.sh
# learns the tokenizer (train_scale.py --learn-only), copies the trained run FROM as gpu/model
# (its configuration, tokenizer and latest weights), SRC_FROM as gpu/src.txt, and fetches the
# wheels the machine lacks into gpu/whl (num2words, ctranslate2, and docopt built here: it has
# none on PyPI); ~55 MiB with the repository, of the 64 a lease carries.
# Then, on the GPU machine:
#   STEPS="tests train big" benchmarks/gpu_lease.sh [OUT_DIR]
set -u
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-lease}}
steps=" ${STEPS:-tests train big graphs decode shapes} "
model=${MODEL:-gpu/model} src=${SRC:-gpu/src.txt}
if [ "${STEPS:-}" = prepare ]; then
  set -e
  python3 benchmarks/train_scale.py --pairs 300000 --learn-only --work gpu
  rm -rf gpu/corpus-300000 gpu/model && mkdir -p gpu/model/checkpoints gpu/whl
  cp "$FROM"/config.yaml "$FROM"/tokenizer* gpu/model/
  latest=$(cat "$FROM/checkpoints/latest")
  cp "$FROM/checkpoints/latest" gpu/model/checkpoints/
  mkdir -p "gpu/model/checkpoints/$latest"
  cp "$FROM/checkpoints/$latest/model.safetensors" "gpu/model/checkpoints/$latest/"
  cp "$SRC_FROM" gpu/src.txt
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d gpu/whl num2words
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d gpu/whl \
    "ctranslate2==$(python3 -c 'import ctranslate2; print(ctranslate2.__version__)')"
  python3 -m pip wheel -q --no-deps -w gpu/whl docopt
  grep -qx "/gpu/" .git/info/exclude 2>/dev/null || echo "/gpu/" >> .git/info/exclude
  du -sh gpu
  exit
fi
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if compgen -G "gpu/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    gpu/whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
# CTranslate2's wheels load CUDA 12's cuBLAS: found, if the machine has it anywhere; else, on
# trial, CUDA 13's under CUDA 12's names (a machine with CUDA 13 alone: 11-26's, 11-28's)
cublas=$(find / -name 'libcublas.so.12*' -not -path '/proc/*' 2>/dev/null | head -1)
if [ -z "$cublas" ]; then
  cublas13=$(find / -name 'libcublas.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)
  if [ -n "$cublas13" ]; then
    mkdir -p /tmp/cublas12 && cublas=/tmp/cublas12/libcublas.so.12
    ln -sf "$cublas13" "$cublas"
    ln -sf "$(dirname "$cublas13")"/libcublasLt.so.13 /tmp/cublas12/libcublasLt.so.12
    export LD_LIBRARY_PATH=$(dirname "$cublas13")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
fi
[ -n "$cublas" ] && export LD_LIBRARY_PATH=$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  echo "CUDA 12 cuBLAS: ${cublas:-none}${cublas13:+ (CUDA 13 cuBLAS: $cublas13)}"
  python3 -c "import ctranslate2 as c; print('ctranslate2', c.__version__, 'CUDA devices:',
c.get_cuda_device_count())" 2>&1 | tail -1
} 2>&1 | tee "$out/machine.txt"

train_scale() {  # NAME SECONDS ARGS...: train_scale.py for SECONDS of training, into NAME.txt
  local name=$1 seconds=$2; shift 2
  echo "== train_scale.py $*" > "$out/$name.txt"
  timeout $((seconds + 90)) python3 benchmarks/train_scale.py --pairs 300000 --updates 100000 \
    --max-time "$seconds" --work /tmp/train-scale --tokenizer gpu/tokenizer-300000-37000 "$@" \
    2>&1 | grep -v -E "^\s*$" | tail -30 >> "$out/$name.txt"
  cat "$out/$name.txt"
}
if [[ $steps == *" tests "* ]]; then
  (echo "== pytest tests/gpu"; timeout 150 python3 -m pytest tests/gpu -q -p no:cacheprovider \
    -rs 2>&1 | tail -25) > "$out/tests.txt" &
fi
[[ $steps == *" train "* ]] && train_scale train "${TRAIN_SECONDS:-240}" --log-every 100
[[ $steps == *" big "* ]] && train_scale big "${BIG_SECONDS:-90}" --config wmt14_en_de_big \
  --log-every 50 data.max_tokens=10240 train.accumulate=1
wait
[ -f "$out/tests.txt" ] && cat "$out/tests.txt"

if [[ $steps == *" graphs "* ]]; then
  for dtype in float32 bfloat16; do
    timeout 100 python3 benchmarks/cuda_graph_step.py --dtype $dtype 2>&1 | tail -12
  done | tee "$out/graphs.txt"
fi

ct2=""  # CTranslate2 on the GPU only where its cuBLAS is (11-26's H100 had CUDA 13's alone)
[ -n "$cublas" ] && python3 -c "import ctranslate2 as c; assert c.get_cuda_device_count()" \
  2>/dev/null && ct2="transduce-ct2 ct2-fp32 ct2-int8"
if [[ $steps == *" decode "* ]]; then
  timeout 150 python3 benchmarks/decode_speed.py --device cuda --model "$model" --src "$src" \
    --part 1 --engines transduce transduce-compiled hf transduce-bf16 $ct2 2>&1 | tee "$out/decode.txt"
fi
if [[ $steps == *" shapes "* ]]; then
  timeout 200 python3 benchmarks/decode_speed.py --device cuda --model "$model" --src "$src" \
    --part 2 --shapes ${SHAPES:-tiny base} --engines transduce transduce-compiled hf transduce-bf16 \
    $ct2 2>&1 | tee "$out/shapes.txt"
fi
