# Sourced on a GPU machine before running programs packed by scripts/gpu-bundle.sh DIR:
#   source scripts/gpu-env.sh DIR      (unpacks DIR.tar.xz first where only that was carried)
# Finds the CUDA libraries in the toolkit (/usr/local/cuda) and in PyTorch's CUDA wheels (cuDNN,
# NCCL, cuBLAS), and puts DIR/lib (lockstep's other libraries) first.
_lockstep_bundle=${1:-.gpu}
if [ ! -d "$_lockstep_bundle" ] && [ -f "$_lockstep_bundle.tar.xz" ]; then
  tar xJf "$_lockstep_bundle.tar.xz" -C "$(dirname "$_lockstep_bundle")" 2>/dev/null ||
    python3 -m tarfile -e "$_lockstep_bundle.tar.xz" "$(dirname "$_lockstep_bundle")"
fi
_lockstep_wheels=$(python3 - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    roots = [os.path.dirname(p) for p in nvidia.__path__]
except ImportError:
    roots = []
print(":".join(sorted({os.path.dirname(f) for r in roots for f in glob.glob(r + "/nvidia/*/lib/*.so*")})))
PY
)
export LD_LIBRARY_PATH="$(cd "$_lockstep_bundle/lib" && pwd):${_lockstep_wheels}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="$(cd "$_lockstep_bundle/bin" && pwd):$PATH"
unset _lockstep_bundle _lockstep_wheels
