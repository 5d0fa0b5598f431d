# Thin wrappers: the real build is CMake, the real test runner CTest.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ifeq ($(CI),true)
  CMAKE_FLAGS += -DLOCKSTEP_WERROR=ON
endif

.PHONY: all deps configure build test run bench clean

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

clean:
	rm -rf $(BUILD)
