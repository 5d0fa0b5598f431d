#!/usr/bin/env bash
# Installs everything lockstep's build, tests, benchmarks and `make run` need, from Debian's
# packages. Idempotent: when every package is present it changes nothing and returns quickly.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev            # oneDNN: the CPU kernels
  libgloo-dev            # Gloo: the multi-host collective backend
  libopenmpi-dev openmpi-bin   # MPI backend and mpirun
  libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libssl-dev             # OpenSSL's libcrypto: HMAC-SHA256 of the store's join token
  liburing-dev           # io_uring: ZeRO's NVMe offload swaps optimizer states through it
  libturbojpeg0-dev libpng-dev  # image datasets: JPEG (libjpeg-turbo) and PNG decoding
  libarchive-dev         # CIFAR-10 read inside its downloaded .tar.gz
  time                   # /usr/bin/time: peak memory of the CLI in tests
  clang-14 libclang-rt-14-dev libomp-14-dev  # `make fuzz`: libFuzzer, ASan/UBSan runtimes, OpenMP for clang
  clang-format           # `make format-check` (CI) and `make format`
  dataset-fashion-mnist  # the data `make run` trains on
  fortunes               # English text: the default corpus of the language-model examples
  python3-torch python3-numpy  # PyTorch 1.13 (CPU): side-by-side benchmarks, interop tests
  python3-pil python3-torchvision  # Pillow, torchvision: image_folder checked against their pixels and ImageFolder (tests/data)
  python3-venv           # the interop tests' virtual environment (PyPI's safetensors)
  python3-dev            # Python.h: DeepSpeed's JIT-built C++ ops (CPU Adam, shm comm), bench/zero.bench.sh
  iproute2 procps        # network namespaces for multi-host tests; ps/pgrep for orphan checks
  libjs-chart.js         # Chart.js, built into `lockstep report`'s self-contained pages
  chromium tmux          # the report's browser test; the progress line's terminal test
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
