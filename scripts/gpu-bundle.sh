#!/usr/bin/env bash
# Packs built lockstep programs for a GPU machine that lacks lockstep's libraries (the lent H100 has
# CUDA and PyTorch's CUDA wheels but no oneDNN, Gloo, MPI, yaml-cpp or fmt): copies the programs to
# OUT/bin and every shared library they need to OUT/lib, less the C library and the CUDA libraries
# (there, scripts/gpu-env.sh points LD_LIBRARY_PATH at the toolkit and the wheels' copies), and packs
# OUT into OUT.tar.xz: the test programs and oneDNN come to about 200 MB, more than the device tool
# carries (64 MiB). xz with a 64 MiB dictionary finds the kernels every statically linked program
# repeats: about 24 MB where gzip (a 32 KiB window) gave 60. Carry OUT.tar.xz; gpu-env.sh unpacks it
# there (tar xJf, or Python's tarfile where xz is missing).
# STRIP=1 strips the copies of their symbols (a third of the size).
#   bash scripts/gpu-bundle.sh OUT PROGRAM...
set -euo pipefail
out=$1
shift
mkdir -p "$out/bin" "$out/lib"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink)'
for prog in "$@"; do
  cp -f "$prog" "$out/bin/"
  ldd "$prog" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    if [[ ! -e $out/lib/$name ]]; then
      cp -L "$path" "$out/lib/$name"
      if [ "${STRIP:-0}" = 1 ]; then strip --strip-unneeded "$out/lib/$name"; fi
    fi
  done
  if [ "${STRIP:-0}" = 1 ]; then strip --strip-unneeded "$out/bin/$(basename "$prog")"; fi
done
XZ_OPT="-9 -T0" tar cJf "$out.tar.xz" -C "$(dirname "$out")" "$(basename "$out")"
du -sh "$out" "$out.tar.xz"
