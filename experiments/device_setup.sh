# Source on the device machine, in the repository root, before a run of docs/ablations.md:
#   source experiments/device_setup.sh && python3 experiments/ablation.py ...
# Installs the carried wheels (the packages the device image lacks), unpacks the carried data and
# NLTK tagger into /tmp/data, rebuilds all-MiniLM-L6-v2 in /tmp/minilm (SHA-256 checked), and sets
# JAX to the GPU at its default matmul precision (README: the slow suite on an accelerator).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .carry/whl/*.whl || return 1
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p /tmp/data && tar -xJf .carry/data.tar.xz -C /tmp/data || return 1
export NLTK_DATA=/tmp/data/nltk_data
if [ -f .carry/minilm.pack ]; then
  python3 experiments/pack_minilm.py unpack --pack=.carry/minilm.pack --out=/tmp/minilm || return 1
fi
export JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=default PYTHONUNBUFFERED=1
