#!/usr/bin/env bash
# lockstep used as a library by a project of its own (tests/install/consumer), built for real.
#   install_test.sh find_package    BUILD_DIR WORK_DIR [cmake args for the consumer...]
#     installs BUILD_DIR into WORK_DIR/prefix (cmake --install), checks the layout, builds the
#     consumer with find_package(lockstep) against that prefix, runs it (it trains a step).
#   install_test.sh add_subdirectory SOURCE_DIR WORK_DIR [cmake args...]
#     configures the consumer with add_subdirectory(SOURCE_DIR) (it checks that every lockstep::
#     module is a static library and that lockstep's tests, benchmarks and examples stay out) and
#     compiles the consumer's main.cpp, not lockstep itself (see below).
set -euo pipefail

mode=$1 src_or_build=$2 work=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
consumer_src=$here/consumer source_root=$(cd "$here/../.." && pwd)
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"

run_consumer() {
  local out
  out=$("$work/build/consumer") || fail "the consumer exited with $?: $out"
  echo "$out"
  grep -q "^consumer: trained mlp 20 steps, loss .* parameters changed: yes$" <<<"$out" ||
    fail "the consumer's output lacks its training line"
}

case "$mode" in
  find_package)
    build=$src_or_build prefix=$work/prefix
    cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install failed"; }
    for f in lib/cmake/lockstep/lockstepConfig.cmake lib/cmake/lockstep/lockstepConfigVersion.cmake \
             lib/cmake/lockstep/lockstepTargets.cmake lib/cmake/lockstep/FindOneDNN.cmake \
             lib/cmake/lockstep/FindGloo.cmake bin/lockstep; do
      [ -f "$prefix/$f" ] || fail "cmake --install did not install $f"
    done
    for m in util tensor kernels autograd nn optim data comm parallel launch train; do
      [ -f "$prefix/lib/liblockstep_$m.a" ] || fail "cmake --install did not install lib/liblockstep_$m.a"
    done
    # Exactly the source tree's headers (the CLI's own excepted), at the same paths.
    diff <(cd "$source_root" && find lockstep -name '*.h' ! -path 'lockstep/cli/*' | sort) \
         <(cd "$prefix/include" && find . -type f | sed 's|^\./||' | sort) ||
      fail "the installed include/ tree differs from lockstep/**/*.h (< source only, > installed only)"
    "$prefix/bin/lockstep" --help >/dev/null || fail "the installed lockstep CLI does not run"
    # The consumer sees lockstep only through the prefix.
    cmake -S "$consumer_src" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$work/configure.log" 2>&1 ||
      { cat "$work/configure.log"; fail "configuring the consumer with find_package(lockstep) failed"; }
    found=$(sed -n 's/^lockstep_DIR:PATH=//p' "$work/build/CMakeCache.txt")
    [ "$found" = "$prefix/lib/cmake/lockstep" ] || fail "find_package(lockstep) found '$found', not the test's prefix"
    cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building the consumer failed"; }
    run_consumer
    ;;
  add_subdirectory)
    src=$src_or_build
    cmake -S "$consumer_src" -B "$work/build" -DLOCKSTEP_SOURCE_DIR="$src" "$@" >"$work/configure.log" 2>&1 ||
      { cat "$work/configure.log"; fail "configuring the consumer with add_subdirectory(lockstep) failed"; }
    # Compiling lockstep a second time takes many minutes on a small machine, and ccache rarely
    # saves it (with a base_dir, paths are hashed relative to the build dir, which differs here),
    # so only the consumer's main.cpp is compiled: that proves the build-tree include paths and
    # C++20 reach a parent's target. Ninja builds one object file without the libraries it links.
    if grep -q '^build CMakeFiles/consumer.dir/main.cpp.o:' "$work/build/build.ninja" 2>/dev/null; then
      cmake --build "$work/build" --target CMakeFiles/consumer.dir/main.cpp.o >"$work/build.log" 2>&1 ||
        { cat "$work/build.log"; fail "compiling the consumer under add_subdirectory(lockstep) failed"; }
      [ -z "$(find "$work/build/lockstep-build" -name '*.a')" ] || fail "compiling main.cpp built lockstep's libraries too"
      echo "install_test: add_subdirectory: configured, main.cpp compiled against the source tree"
    else
      echo "install_test: add_subdirectory: configured only (the main.cpp-only compile needs the Ninja generator)"
    fi
    ;;
  *) fail "unknown mode '$mode' (find_package or add_subdirectory)" ;;
esac
echo "install_test: $mode OK"
