# shellcheck shell=bash
# What the one-GPU comparisons of lockstep and PyTorch (bench/gpu.bench.sh, bench/gpu_lm.bench.sh)
# share, sourced from the repository's root: the bundle's library path for lockstep's programs and
# the machine's own for python3, the output directory, and one logged run of each side.

# BUNDLE: the programs packed by scripts/gpu-bundle.sh on the path, $host_ld the machine's own
# library path, $out the directory of the raw lines and logs (OUT_DIR, or a new one); prints the GPU.
gpu_bench_start() {
  local bundle=$1 bundle_lib
  # python3 (PyTorch above all) runs with the machine's own library path: scripts/gpu-env.sh puts the
  # bundle's copies of the build machine's libraries (libstdc++, libgomp, zlib, OpenSSL, ...) first,
  # and PyTorch or a module it compiles at run time (torch.compile) must not load those.
  host_ld=${LD_LIBRARY_PATH-}
  # shellcheck disable=SC1091
  source scripts/gpu-env.sh "$bundle" || exit 2
  bundle_lib=$(cd "$bundle/lib" && pwd)
  host_ld=$(tr ':' '\n' <<<"$host_ld" | grep -vxF "$bundle_lib" | paste -sd:)  # gpu-env.sh sourced already
  out=${OUT_DIR:-$(mktemp -d)}
  mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2

  echo "== nvidia-smi: name, driver, memory"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "(nvidia-smi failed)"
}

limit_note() { if [ "$1" = 124 ]; then echo ": time limit"; fi; }

# NAME PROGRAM COMMAND...: runs COMMAND, its lines to $out/NAME.txt (and the terminal), its stderr to
# $out/NAME.log, and a line naming PROGRAM when it fails; then the log's last lines.
logged_run() {
  local name=$1 program=$2
  shift 2
  {
    "$@" 2>"$out/$name.log"
    rc=$?
    [ "$rc" = 0 ] || echo "($program exited with status $rc$(limit_note "$rc"); stderr: $out/$name.log)"
  } | tee "$out/$name.txt"
  tail -n 5 "$out/$name.log"
}

# NAME LIMIT_S PROGRAM ARGS...: one run of the bundle's PROGRAM, stopped after LIMIT_S seconds.
lockstep_run() {
  local name=$1 limit=$2 program=$3
  shift 3
  logged_run "$name" "$program" timeout "$limit" "$program" "$@"
}

# LIMIT_S SCRIPT ARGS...: python3 on bench/scripts/SCRIPT with the machine's library path.
host_python() {
  local limit=$1
  shift
  (cd bench/scripts && LD_LIBRARY_PATH=$host_ld PYTHONUNBUFFERED=1 timeout "$limit" python3 "$@")
}

# NAME LIMIT_S SCRIPT ARGS...: one run of PyTorch's side, stopped after LIMIT_S seconds.
torch_run() {
  local name=$1 limit=$2 script=$3
  shift 3
  logged_run "$name" "$script" host_python "$limit" "$script" "$@"
}
