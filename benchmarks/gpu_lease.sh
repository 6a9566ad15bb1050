#!/usr/bin/env bash
# The checks of one short lease of a GPU machine, in one command, each under a time limit so
# that a lease of a few minutes holds them all (docs/speed.md): the GPU tests, the base model's
# training speed and memory at WMT14's batch (benchmarks/train_scale.py), and decoding speed on
# the GPU (benchmarks/decode_speed.py --device cuda). Results go to OUT_DIR (default $OUT, else
# gpu-lease/).
#
# The GPU machine may reach no network: prepare beforehand, on any machine, in the repository:
#   python benchmarks/train_scale.py --pairs 300000 --learn-only --work gpu  # the tokenizer
#   transduce train configs/quickstart.yaml --run-dir gpu/quickstart         # a model to decode
#   python -c "from transduce.data.numbers import NumberWords as N
#   print('\n'.join(s for s, _ in N('test').pairs()))" > gpu/numbers.en       # its test inputs
#   pip download ctranslate2 num2words ... -d gpu/whl   # wheels the machine lacks, if any
# then, on the GPU machine:
#   benchmarks/gpu_lease.sh [OUT_DIR]
set -u
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-lease}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if compgen -G "gpu/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site gpu/whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
# CTranslate2's wheels load CUDA 12's cuBLAS: found, if the machine has it anywhere
cublas=$(find / -name 'libcublas.so.12*' -not -path '/proc/*' 2>/dev/null | head -1)
[ -n "$cublas" ] && export LD_LIBRARY_PATH=$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  echo "CUDA 12 cuBLAS: ${cublas:-none}"
  python3 -c "import ctranslate2 as c; print('ctranslate2', c.__version__, 'CUDA devices:',
c.get_cuda_device_count())" 2>&1 | tail -1
} 2>&1 | tee "$out/machine.txt"

echo "== pytest tests/gpu" | tee "$out/tests.txt"
timeout 120 python3 -m pytest tests/gpu -q -p no:cacheprovider 2>&1 | tail -25 | tee -a "$out/tests.txt"

echo "== train_scale.py: base, 300,000 made-up pairs" | tee "$out/train.txt"
timeout 230 python3 benchmarks/train_scale.py --pairs 300000 --updates 2000 --max-time 120 \
  --log-every 50 --work /tmp/train-scale --tokenizer gpu/tokenizer-300000-37000 2>&1 \
  | grep -v -E "^\s*$" | tail -30 | tee -a "$out/train.txt"

echo "== decode_speed.py --device cuda" | tee "$out/decode.txt"
ct2=""  # CTranslate2 on the GPU only where its cuBLAS is (11-26's H100 had CUDA 13's alone)
[ -n "$cublas" ] && python3 -c "import ctranslate2 as c; assert c.get_cuda_device_count()" \
  2>/dev/null && ct2="transduce-ct2 ct2-fp32 ct2-int8"
timeout 140 python3 benchmarks/decode_speed.py --device cuda --model gpu/quickstart \
  --src gpu/numbers.en --part 1 --engines transduce hf $ct2 transduce-compiled 2>&1 \
  | tee -a "$out/decode.txt"
timeout 75 python3 benchmarks/decode_speed.py --device cuda --model gpu/quickstart \
  --src gpu/numbers.en --part 2 --shapes base --engines transduce hf 2>&1 \
  | tee -a "$out/decode.txt"
