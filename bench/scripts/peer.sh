# Sourced by the side-by-side benchmarks: the PyTorch peer's interpreter and a torchrun-style rank
# starter, one copy for all of them.
#   peer_python BUILD_DIR NAME [PACKAGE...]
#                                sets $python: $PYTHON if given (e.g. /usr/bin/python3 for Debian's
#                                1.13), else current PyTorch from PyPI in BUILD_DIR/bench-venv ($VENV),
#                                installed on first use, with the PyPI PACKAGEs (each also the module
#                                name it imports as, e.g. deepspeed) installed on top when missing
#   run_ranks WORLD CMD...       WORLD ranks with torchrun's variables, rank r pinned to core r (BIND=0:
#                                not pinned); prints rank 0's stdout, and with ERR_TO=PREFIX writes rank
#                                r's stderr to PREFIX.r. Uses and advances $port.
#   peer_best KEY WORLD CMD...   runs the peer's WORLD ranks without and with the glibc malloc tunables
#                                that keep its buffers mapped ($tunables) and prints the larger KEY=value
#                                figure of rank 0's output (a rate), then "on" or "off" (tunables):
#                                the peer's best case, as the developers' guide asks
tunables="glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"

peer_python() {
  python=${PYTHON:-}
  if [ -n "$python" ]; then return; fi
  local venv=${VENV:-$1/bench-venv}
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, numpy" 2>/dev/null; then
    echo "$2: installing PyPI's torch and numpy into $venv (once; gigabytes)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q torch numpy
  fi
  local pkg
  for pkg in "${@:3}"; do
    if ! "$venv/bin/python" -c "import $pkg" 2>/dev/null; then
      echo "$2: installing PyPI's $pkg into $venv (once)" >&2
      "$venv/bin/pip" install -q "$pkg"
    fi
  done
  python=$venv/bin/python
}

run_ranks() {
  local world=$1
  shift
  local pids=() r ncpu pin err
  ncpu=$(nproc --all)  # plain nproc honours OMP_NUM_THREADS
  for ((r = world - 1; r >= 0; r--)); do
    pin=()
    [ "${BIND:-1}" = 1 ] && pin=(taskset -c $((r % ncpu)))
    err=/dev/null
    [ -n "${ERR_TO:-}" ] && err="$ERR_TO.$r"
    if [ "$r" -eq 0 ]; then
      RANK=0 LOCAL_RANK=0 WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "${pin[@]}" "$@" 2>"$err"
    else
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "${pin[@]}" "$@" >/dev/null 2>"$err" &
      pids+=($!)
    fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  port=$((port + 1))
}

peer_best() {
  local key=$1
  shift
  local plain tuned
  plain=$(run_ranks "$@" | sed -n "s/.*$key=\([0-9.]*\).*/\1/p" | tail -n 1)
  tuned=$(GLIBC_TUNABLES=$tunables run_ranks "$@" | sed -n "s/.*$key=\([0-9.]*\).*/\1/p" | tail -n 1)
  python3 -c "import sys; p, t = float(sys.argv[1]), float(sys.argv[2]); print(max(p, t), 'on' if t > p else 'off')" \
    "${plain:-0}" "${tuned:-0}"
}
