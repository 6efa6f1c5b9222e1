# Thin wrapper around CMake. `make` builds build/ember; `make test` runs the
# whole suite; `make asan` runs it under ASan+UBSan; `make run` sets up and
# serves the demo model.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all build test asan fuzz install run clean deps

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_ARGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DEMBER_SANITIZE=ON -DEMBER_CUDA=OFF $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		EMBER_SANITIZED=1 ctest --output-on-failure -j $(JOBS)

fuzz:
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DEMBER_FUZZ=ON -DEMBER_CUDA=OFF $(CMAKE_ARGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

deps:
	bash scripts/install-deps.sh

run: deps build
	./$(BUILD)/ember serve --host 127.0.0.1 --port 8080

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
