#!/usr/bin/env bash
# The CPU kernels' hand-written f32 loops (GELU, softmax, cross entropy: kernels/cpu/*.cpp, built
# as AVX2 clones of plain loops) are vectorised in the built binary: the compiler gives up on a loop
# silently (a float compare in an inlined helper did, and GELU ran 3x slower), so the AVX2 clone of
# each is read back with objdump and must compute on 256-bit registers.
#   vectorised_loops.sh LOCKSTEP_BIN WORKDIR
set -euo pipefail
bin=$1
work=$2
mkdir -p "$work"
command -v objdump >/dev/null || { echo "objdump (binutils) is needed" >&2; exit 1; }
objdump -d --no-show-raw-insn -C "$bin" >"$work/lockstep.asm"
failed=0
for fn in geluTanhRun geluTanhGradRun expRow sumExp softmaxMinus softmaxGrad; do
  body=$(awk -v fn="$fn" '
    index($0, "::" fn "(") && /\[clone \.avx2\]>:$/ { on = 1; next }
    on && /^$/ { exit }
    on { print }' "$work/lockstep.asm")
  if [ -z "$body" ]; then
    echo "FAIL: no AVX2 clone of $fn in $bin" >&2
    failed=1
    continue
  fi
  ymm=$(grep -c ymm <<<"$body" || true)
  if [ "$ymm" -lt 3 ]; then
    echo "FAIL: the AVX2 clone of $fn is not vectorised ($ymm instructions on ymm registers)" >&2
    failed=1
  else
    echo "ok: $fn ($ymm ymm instructions)"
  fi
done
exit $failed
