#!/usr/bin/env bash
# ZeRO-Infinity's NVMe offload of the optimizer states at scale: a wide MLP of 1.015 B f32
# parameters (1024 -> 16 x 8192 -> 10; 16.2 GB of parameters, gradients and Adam states), ZeRO
# stage 2 on 2 ranks, Adam's states in swap files, streamed in sub-groups of 2e7 elements with 6
# swap buffers (3 sub-groups in memory, 480 MB: read, step and write overlap). Prints each step's
# time, the swap I/O each rank moved during its optimizer step and the bandwidth that makes, each
# rank's peak RSS (VmHWM), and the disk's own bandwidth measured with dd (O_DIRECT, 64 MiB blocks)
# in the same directory first.
#   bench/zero_nvme.bench.sh [BUILD_DIR] [NVME_PARENT_DIR] [bench_zero_nvme_step options...]
# e.g. `--stage 3 --max-reuse-distance 0 --max-live-parameters 100000000`: stage 3 holding one layer's
# whole parameters at a time, so each rank keeps its parameter and gradient partitions only; add
# `--offload-param --zero-init` for ZeRO-Infinity: the gradient and parameter partitions in swap files
# too, and the model built under zero.Init (never whole in a rank's memory), about 2.5 GB per rank.
# Needs about 9 GB free under NVME_PARENT_DIR (default /tmp; 17 GB with --offload-param --zero-init)
# and about 15 GB of memory without them. The swap files are unlinked as soon as they are created; the
# dd file and the scratch directory are removed at exit.
set -euo pipefail
build=${1:-build}
parent=${2:-/tmp}
shift $(( $# < 2 ? $# : 2 ))
dir=$(mktemp -d "$parent/lockstep-nvme-bench-XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "disk: $(df -h --output=source,fstype,size,avail "$dir" | tail -1)"
echo "dd, 4 GiB, O_DIRECT:"
echo "  write: $(dd if=/dev/zero of="$dir/dd" bs=64M count=64 oflag=direct 2>&1 | tail -1)"
echo "  read:  $(dd if="$dir/dd" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1)"
rm -f "$dir/dd"
"$build/lockstep" run --nproc-per-node 2 "$build/bench/bench_zero_nvme_step" --nvme "$dir" "$@"
echo "left in $dir after the run: $(ls -A "$dir" | wc -l) files"
