# The two commands of the README, over CMake.
#   make demo  builds lull-lab (Release) and runs every scenario on small sizes
#   make test  runs the suite: a debug build, again under ASan+UBSan, the
#              threaded cases under ThreadSanitizer, and the suite again
#              with slices ending at random points (test-yield)
JOBS ?= 2
CMAKE ?= cmake
CTEST ?= ctest
CTEST_FLAGS ?= --output-on-failure -j$(JOBS)

.PHONY: all demo test test-debug test-asan test-tsan lab bench format clean install

all: lab

build/release/Makefile:
	$(CMAKE) -S . -B build/release -DCMAKE_BUILD_TYPE=Release

lab: build/release/Makefile
	$(CMAKE) --build build/release -j$(JOBS)

# demo's first screen is what lull-lab found: the build's output goes to
# build/release/build.log and is printed (errors in full) only on failure.
DEMO_LOG = build/release/build.log
demo:
	@mkdir -p build/release
	@printf 'building lull-lab (Release, log in %s) ... ' $(DEMO_LOG)
	@{ test -f build/release/Makefile || \
	     $(CMAKE) -S . -B build/release -DCMAKE_BUILD_TYPE=Release; } \
	   > $(DEMO_LOG) 2>&1 && \
	 $(CMAKE) --build build/release --target lull-lab -j$(JOBS) -- --no-print-directory \
	   >> $(DEMO_LOG) 2>&1 || \
	 { echo failed; grep -v 'ing directory' $(DEMO_LOG); exit 1; }
	@echo done
	@./build/release/lab/lull-lab all --quick --json build/release/lab.json --plot build/release/lab.svg

test: test-debug test-asan test-tsan test-yield

test-debug:
	$(CMAKE) -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug
	$(CMAKE) --build build/debug -j$(JOBS)
	$(CTEST) --test-dir build/debug $(CTEST_FLAGS)

test-asan:
	$(CMAKE) -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DLULL_SANITIZE=address,undefined -DLULL_BUILD_LAB=OFF
	$(CMAKE) --build build/asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(CTEST) --test-dir build/asan $(CTEST_FLAGS)

test-tsan:
	$(CMAKE) -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DLULL_SANITIZE=thread -DLULL_BUILD_LAB=OFF
	$(CMAKE) --build build/tsan -j$(JOBS)
	TSAN_OPTIONS=halt_on_error=1 $(CTEST) --test-dir build/tsan -L threaded $(CTEST_FLAGS)

install: lab
	$(CMAKE) --install build/release

format:
	clang-format -i include/*.h src/*.c src/*.h tests/*.c tests/*.h lab/*.c lab/*.h lab/peers/*.c bench/*.c examples/*.c

clean:
	rm -rf build

# The slice shuffle (issue 11): `make test-yield` runs the suite with
# LULL_TEST_YIELD_OFTEN, where slices end at random points (src/clock.c);
# nothing the contracts order may change.
.PHONY: test-yield

test-yield:
	$(CMAKE) -S . -B build/yield -DCMAKE_BUILD_TYPE=Debug -DLULL_TEST_YIELD_OFTEN=ON -DLULL_BUILD_LAB=OFF -DLULL_BUILD_EXAMPLES=OFF
	$(CMAKE) --build build/yield -j$(JOBS)
	$(CTEST) --test-dir build/yield -LE install $(CTEST_FLAGS)

# `make soak SECONDS=N` (issue 11): the reference model against fresh seeds
# for N seconds under ASan+UBSan, then the cross-thread stress at
# 10,000,000 operations under ThreadSanitizer (LULL_STRESS_OPS changes it).
SECONDS ?= 60
.PHONY: soak

soak:
	$(CMAKE) -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DLULL_SANITIZE=address,undefined -DLULL_BUILD_LAB=OFF
	$(CMAKE) --build build/asan -j$(JOBS) --target test_model
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  LULL_SOAK_SECONDS=$(SECONDS) ./build/asan/tests/test_model soak
	$(CMAKE) -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DLULL_SANITIZE=thread -DLULL_BUILD_LAB=OFF
	$(CMAKE) --build build/tsan -j$(JOBS) --target test_stress
	TSAN_OPTIONS=halt_on_error=1 ./build/tsan/tests/test_stress soak
