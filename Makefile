# Thin wrappers: the real build is CMake, the real test runner CTest.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ifeq ($(CI),true)
  CMAKE_FLAGS += -DLOCKSTEP_WERROR=ON
endif

.PHONY: all deps configure build test run bench fuzz format format-check clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600

run: build
	bash scripts/run-example.sh $(BUILD)

bench: build
	bash bench/run_all.sh $(BUILD)

# libFuzzer targets (docs/fuzzing.md): a separate clang 14 build with ASan + UBSan, then each target
# for FUZZ_SECONDS (FUZZ_RUNS=N: at most N executions). `make test` replays their corpora with gcc.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-14 \
	  -DLOCKSTEP_FUZZ=ON -DLOCKSTEP_CUDA=OFF
	cmake --build $(FUZZ_BUILD) --target fuzz_targets -j $(JOBS)
	bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Every tracked C++ file against .clang-format: `make format-check` says which files differ (CI runs
# it before building), `make format` rewrites them. Neither needs a build.
CLANG_FORMAT ?= clang-format
CXX_FILES = git ls-files -z -- '*.h' '*.cpp' '*.cu' '*.cuh'
format-check: deps
	$(CXX_FILES) | xargs -0 $(CLANG_FORMAT) --dry-run -Werror

format: deps
	$(CXX_FILES) | xargs -0 $(CLANG_FORMAT) -i

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
