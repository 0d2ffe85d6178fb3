#!/usr/bin/env bash
# One prepared GPU benchmark run: throughput, retrieval and scale, in under 8 minutes.
#
# Needs no network: jax (with CUDA), flax, numpy and this checkout. faiss is optional
# (retrieval.py times only ecomjax when it is missing). JSONL rows go to $OUT if set
# (the device runner collects it), else benchmarks/results/. Every stage has its own
# wall-clock cap, so one slow compile cannot eat the others' time; a capped stage keeps
# whatever rows it had already written.
#
#   bash benchmarks/gpu.sh                  # from the repository root
#   PY=python3 OUT=/tmp/gpu bash benchmarks/gpu.sh
set -u
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
DEST=${OUT:-benchmarks/results}
mkdir -p "$DEST"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # so peak_bytes_in_use is what a run needs
start=$SECONDS
stage() {  # stage NAME SECONDS CMD...
  local name=$1 cap=$2; shift 2
  echo "=== $name (cap ${cap}s, t=$((SECONDS - start))s)"
  timeout --kill-after=10 "$cap" "$@" 2>&1 | tee "$DEST/$name.log" | grep -v -i "warn"
  echo "=== $name exit ${PIPESTATUS[0]} after $((SECONDS - start))s"
}

"$PY" - <<'EOF' | tee "$DEST/env.txt"
import jax, platform
print({"jax": jax.__version__, "python": platform.python_version(),
       "devices": [str(d) for d in jax.devices()]})
try:
    import faiss
    print({"faiss": faiss.__version__})
except ImportError:
    print({"faiss": None})
EOF

# 1. Retrieval (about 1-2 min): exact top-k at N = 100k / 1M, D = 64 / 384, batch 256.
stage retrieval 150 "$PY" benchmarks/retrieval.py --n 100000 1000000 --d 64 384 --k 10 200 \
  --dtypes float32 bfloat16 --chunks 262144 --repeats 5 --out "$DEST/retrieval.jsonl"

# 1b. The Pallas kernel (ecomjax/kernels/pallas_topk.py) compiled for the GPU: queries/s at N = 1M
#     (k = 10; it suits k <= ~64). Its rows carry the id agreement with faiss when faiss is
#     there; `pytest ecomjax/kernels/pallas_topk_test.py -k compiled_gpu` checks exactness.
stage retrieval_pallas 90 "$PY" benchmarks/retrieval.py --impl pallas --n 1000000 --d 64 384 \
  --k 10 --dtypes float32 bfloat16 --block-rows 256 --repeats 5 --out "$DEST/retrieval.jsonl"

# 2. Throughput (CART, oracle): batched vs looped; one compile per batch size.
stage throughput 150 "$PY" benchmarks/throughput.py --sizes 1024 16384 --repeats 3 \
  --loop-episodes 8 --out "$DEST/throughput.jsonl"

# 3. Scale: C1 against N and B in the time left (each config in its own subprocess).
left=$(( 450 - (SECONDS - start) ))
if [ "$left" -gt 60 ]; then
  stage scale "$left" "$PY" benchmarks/scale.py --tasks C1 \
    --n-sweep 1000 100000 1000000 2000000 --b-for-n 1024 --b-sweep 16384 --n-for-b 100000 \
    --repeats 3 --timeout 120 --budget $(( left - 15 )) --out "$DEST/scale.jsonl"
fi
echo "total $((SECONDS - start))s; rows in $DEST"
