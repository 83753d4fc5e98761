# The two commands of the README, over CMake.
#   make demo  builds lull-lab (Release) and runs every scenario on small sizes
#   make test  runs the suite: a debug build, again under ASan+UBSan, the
#              threaded cases under ThreadSanitizer, and the suite again
#              with slices ending at random points (test-yield); one line
#              per pass, the whole log in build/<pass>/test.log
#   make test-valgrind  the debug suite under valgrind memcheck (CI runs it
#              after make test; about 3 CPU-minutes: 3-6 minutes on 2
#              cores, depending on what else runs)
#   make lab-bare  every target built (Release, as make demo builds) as on
#              a machine with none of the optional packages: no libuv,
#              libev, libevent, liburing or OpenSSL (LULL_TLS=OFF); one
#              line, the log in build/bare/build.log, printed on failure
JOBS ?= 2
CMAKE ?= cmake
CTEST ?= ctest
CTEST_FLAGS ?= --output-on-failure -j$(JOBS)

.PHONY: all demo test test-debug test-asan test-tsan test-valgrind lab lab-bare bench format clean install sim

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

# The code built only where an optional package is missing (a test's
# #else branch, a lab row that says "not run") is built by no other
# target on a machine that has them all, as CI's has: a warning there
# (-Werror) failed `make demo` and `make test` on a newcomer's machine.
# lab-bare builds it: pkg-config looks in a directory that is not there
# (libuv, libevent, liburing, OpenSSL), libev (no .pc file) is looked for
# under a root that is not there, and LULL_TLS=OFF. It fails, too, when
# the configure step found one of them after all (the build was not bare).
BARE_ENV = PKG_CONFIG_LIBDIR=/nonexistent
BARE_LOG = build/bare/build.log
lab-bare:
	@mkdir -p build/bare
	@printf 'building every target without the optional packages (Release, log in %s) ... ' $(BARE_LOG)
	@{ $(BARE_ENV) $(CMAKE) -S . -B build/bare -DCMAKE_BUILD_TYPE=Release \
	     -DLULL_TLS=OFF -DCMAKE_FIND_ROOT_PATH=/nonexistent \
	     -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY \
	     -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY && \
	   $(BARE_ENV) $(CMAKE) --build build/bare -j$(JOBS) -- --no-print-directory; \
	 } > $(BARE_LOG) 2>&1 || \
	 { echo failed; grep -v 'ing directory' $(BARE_LOG); exit 1; }
	@if grep -E 'lull-lab (peer lib[a-z]+|floor io_uring): found' $(BARE_LOG) || \
	    ! grep -q 'lull: building without TLS' $(BARE_LOG); then \
	  echo "failed: the configure step above found an optional package"; exit 1; fi
	@echo done

# `make test` prints one line per pass: its counts and how long it took;
# the pass's whole output (configure, build, ctest) is in
# build/<pass>/test.log, printed only when the pass fails.
#   $(call quiet_pass,NAME,BUILD_DIR,CMAKE_ARGS,ENV,CTEST_ARGS)
define quiet_pass
	@mkdir -p $(2); start=$$(date +%s); \
	{ $(CMAKE) -S . -B $(2) $(3) && \
	  $(CMAKE) --build $(2) -j$(JOBS) && \
	  $(4) $(CTEST) --test-dir $(2) $(CTEST_FLAGS) $(5); } > $(2)/test.log 2>&1; \
	rc=$$?; secs=$$(( $$(date +%s) - start )); \
	sum=$$(sed -n 's/^[0-9]*% tests passed, \([0-9]*\) tests failed out of \([0-9]*\)$$/\2 \1/p' $(2)/test.log | tail -n 1); \
	skipped=$$(grep -c '\*\*\*Skipped\|Not Run' $(2)/test.log); \
	if [ -n "$$sum" ]; then set -- $$sum; \
	  line="$$(( $$1 - $$2 )) of $$1 passed, $$2 failed, $$skipped skipped"; \
	else line="did not build or run"; fi; \
	printf '%-12s %s  %dm%02ds  (%s)\n' '$(1)' "$$line" $$((secs / 60)) $$((secs % 60)) $(2)/test.log; \
	if [ $$rc -ne 0 ]; then $(call failed_only,$(2)/test.log); exit $$rc; fi
endef

# On a failed pass: each failed case's lines (its result line and the
# output ctest printed for it) and the summary, or, when nothing ran (the
# build failed), the log's last 80 lines.
#   $(call failed_only,LOG)
define failed_only
if grep -q 'tests passed' $(1); then \
	  awk '/\*\*\*(Failed|Timeout|Exception|Not Run)/ {show=1; print; next} \
	       /^ *(Start +[0-9]+:|[0-9]+\/[0-9]+ Test +#)/ {show=0} \
	       /tests passed/ {rest=1} show || rest' $(1); \
	else tail -n 80 $(1); fi
endef

test: test-debug test-asan test-tsan test-yield

test-debug:
	$(call quiet_pass,debug,build/debug,-DCMAKE_BUILD_TYPE=Debug,,)

test-asan:
	$(call quiet_pass,ASan+UBSan,build/asan,-DCMAKE_BUILD_TYPE=Debug -DLULL_SANITIZE=address$(comma)undefined -DLULL_BUILD_LAB=OFF,ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1,)

test-tsan:
	$(call quiet_pass,TSan,build/tsan,-DCMAKE_BUILD_TYPE=Debug -DLULL_SANITIZE=thread -DLULL_BUILD_LAB=OFF,TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp",-L threaded)

# Valgrind memcheck: any error or definitely lost block fails the case.
# The process cases start 100 children rather than 1,000
# (LULL_TEST_CHILDREN): each spawn under valgrind is a fork of valgrind.
# Each case runs as `valgrind ... test_<module> <case>` (LULL_TEST_LAUNCHER).
VALGRIND ?= valgrind
VALGRIND_FLAGS ?= --quiet --error-exitcode=99 --leak-check=full \
  --errors-for-leak-kinds=definite,indirect \
  --suppressions=$(CURDIR)/tests/valgrind.supp
# Left out: cases that assert on real elapsed time (busy/idle split, where a
# slice ends, when a timer fires during a producer, a stream producer's
# slices): valgrind runs code 20-50 times slower, so their timing checks
# fail for that reason alone; and accept_out_of_fds_does_not_spin, which
# lowers RLIMIT_NOFILE, a limit valgrind emulates (it keeps fds of its
# own); and signals_interrupt_reads_and_writes, whose SIGALRM every 200 us
# leaves a program running 20-50 times slower no time to move its data (it
# timed out at 300 s); and test_process.emfile_at_spawn, which lowers
# RLIMIT_NOFILE too (valgrind 3.19 asserts in its own syscall wrapper
# there); test_pipe.signals_during_writes_change_nothing, the same
# SIGALRM storm over 16 MiB; test_process.rlimit_nofile_for_the_child and
# test_fdpass.fds_dropped_under_low_rlimit_close_the_stream,
# frames_before_dropped_fds_still_arrive and
# raw_read_whose_fds_were_dropped_keeps_its_bytes, which lower it too; and
# test_process.fork_while_another_thread_detaches and
# fork_during_the_first_detach, whose fork()ed copies of a threaded
# program hold the other thread's loop, which memcheck in the copy counts
# as lost; test_kv_link.snapshot_without_fork_falls_back_to_inline, under
# whose seccomp filter refusing fork valgrind 3.19 itself dies of SIGSEGV
# (no report: the case passes natively and under ASan);
# test_process.child_starts_with_the_first_and_last_signals_at_default,
# whose parent ignores SIGRTMAX, a signal valgrind keeps for itself;
# test_stream.accept_paused_then_closed_by_its_owner, which lowers
# RLIMIT_NOFILE as accept_out_of_fds_does_not_spin does;
# test_pool.pool_work_done_before_fork_comes_back_done_in_the_child, which
# times its fork by a thread's sleeping state, and under valgrind every
# thread waiting for valgrind's own lock sleeps;
# test_tls.server_out_of_fds_accepts_once_they_are_back, which lowers
# RLIMIT_NOFILE as the stream cases above do; and lull-kv's
# INCRBYFLOAT cases, whose replies
# are Redis' digits of an 80-bit long double, which valgrind computes in
# 64 bits. The memory they touch is covered by the other cases and by
# ASan.
VALGRIND_SKIP ?= test_metrics.busy_and_idle_time|test_quantum.producer_yields|test_quantum.due_timer_fires_during_long_producer|test_quantum.quantum_on_virtual_clock|test_timer.repeat_real_clock_skips_missed_periods|test_stream.producer_waiting_for_drain_does_not_hold_the_slice|test_stream.accept_out_of_fds_does_not_spin|test_stream.signals_interrupt_reads_and_writes|test_process.emfile_at_spawn|test_process.rlimit_nofile_for_the_child|test_fdpass.fds_dropped_under_low_rlimit_close_the_stream|test_process.fork_while_another_thread_detaches|test_process.fork_during_the_first_detach|test_pipe.signals_during_writes_change_nothing|test_fdpass.frames_before_dropped_fds_still_arrive|test_fdpass.raw_read_whose_fds_were_dropped_keeps_its_bytes|test_kv.incrbyfloat_as_redis|test_kv.incrbyfloat_logged_as_set_keepttl|test_kv.hincrbyfloat_as_redis|test_kv_link.snapshot_without_fork_falls_back_to_inline|test_process.child_starts_with_the_first_and_last_signals_at_default|test_stream.accept_paused_then_closed_by_its_owner|test_pool.pool_work_done_before_fork_comes_back_done_in_the_child|test_tls.server_out_of_fds_accepts_once_they_are_back
empty :=
space := $(empty) $(empty)
comma := ,
VALGRIND_LAUNCHER = $(subst $(space),;,$(strip $(VALGRIND) $(VALGRIND_FLAGS)))

test-valgrind:
	@if ! command -v $(VALGRIND) >/dev/null 2>&1; then \
	  echo "test-valgrind: $(VALGRIND) not installed, skipped"; exit 0; fi; \
	$(CMAKE) -S . -B build/valgrind -DCMAKE_BUILD_TYPE=Debug -DLULL_BUILD_LAB=OFF \
	  -DLULL_TEST_TIMEOUT=300 "-DLULL_TEST_LAUNCHER=$(VALGRIND_LAUNCHER)" && \
	$(CMAKE) --build build/valgrind -j$(JOBS) && \
	LULL_TEST_CHILDREN=100 \
	  $(CTEST) --test-dir build/valgrind $(CTEST_FLAGS) -LE install -E '$(VALGRIND_SKIP)'

# `make install PREFIX=DIR` (default /usr/local): the Release library,
# lull.h, lull.pc and the CMake package, and the programs lull-kv and
# lull-lab (bin/; what lull-lab runs in libexec/lull and share/lull). CHECKED=1 installs a checked
# library instead (Release, with lull's debug assertions kept: a call from
# a thread that does not own the loop aborts with a message), for
# development; its build tree is build/checked.
PREFIX ?= /usr/local
CHECKED ?=
INSTALL_BUILD = $(if $(CHECKED),build/checked,build/release)
install:
	$(CMAKE) -S . -B $(INSTALL_BUILD) -DCMAKE_BUILD_TYPE=Release \
	  $(if $(CHECKED),-DLULL_CHECKED=ON -DLULL_BUILD_TESTS=OFF -DLULL_BUILD_LAB=OFF -DLULL_BUILD_EXAMPLES=OFF -DLULL_BUILD_KV=OFF)
	$(CMAKE) --build $(INSTALL_BUILD) -j$(JOBS) --target lull lull_static \
	  $(if $(CHECKED),,lull-kv lull-lab)
	$(CMAKE) --install $(INSTALL_BUILD) --prefix $(PREFIX)

format:
	clang-format -i include/*.h src/*.c src/*.h tests/*.c tests/*.h lab/*.c lab/*.h lab/peers/*.c bench/*.c examples/*.c kv/*.c kv/*.h fuzz/*.c fuzz/*.h

clean:
	rm -rf build

# The slice shuffle: `make test-yield` runs the suite with
# LULL_TEST_YIELD_OFTEN, where slices end at random points (src/clock.c);
# nothing the contracts order may change.
.PHONY: test-yield

test-yield:
	$(call quiet_pass,yield-often,build/yield,-DCMAKE_BUILD_TYPE=Debug -DLULL_TEST_YIELD_OFTEN=ON -DLULL_BUILD_LAB=OFF -DLULL_BUILD_EXAMPLES=OFF,,-LE install)

# `make soak SECONDS=N`: the reference model against fresh seeds
# for N seconds under ASan+UBSan, then the cross-thread stress at
# 10,000,000 operations under ThreadSanitizer (LULL_STRESS_OPS changes it),
# then `lull-lab soak` for N seconds (Release): the pump, loopback,
# replicate and serve (lull-kv) scenarios at random sizes, every event,
# frame and reply checked, RSS, heap, fds and threads compared with the
# warm-up (lab/soak.c). Its seed
# is fresh each time and printed; SOAK_SEED=S repeats one.
SECONDS ?= 60
SOAK_SEED ?=
.PHONY: soak

soak:
	$(CMAKE) -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DLULL_SANITIZE=address,undefined -DLULL_BUILD_LAB=OFF
	$(CMAKE) --build build/asan -j$(JOBS) --target test_model
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  LULL_SOAK_SECONDS=$(SECONDS) ./build/asan/tests/test_model soak
	$(CMAKE) -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DLULL_SANITIZE=thread -DLULL_BUILD_LAB=OFF
	$(CMAKE) --build build/tsan -j$(JOBS) --target test_stress
	TSAN_OPTIONS=halt_on_error=1 ./build/tsan/tests/test_stress soak
	$(CMAKE) -S . -B build/release -DCMAKE_BUILD_TYPE=Release
	$(CMAKE) --build build/release -j$(JOBS) --target lull-lab
	./build/release/lab/lull-lab soak --seconds $(SECONDS) \
	  $(if $(SOAK_SEED),--seed $(SOAK_SEED))

# `make sim` (docs/SIMULATION.md): lull-kv's primary, replicas and clients
# on lull's simulated network (lull-kv-sim, Release), SEEDS seeds (each a
# random cluster, workload and fault schedule, every reply and the
# replicas' keyspaces checked); or, with SECONDS=N on the command line,
# fresh seeds for N seconds (the soak; the first seed is printed). Then
# each planted replication bug must be found within SIM_PLANT_SEEDS
# seeds, and a fault-free run of SIM_COMMANDS commands, in two processes,
# must give one trace hash. A failure prints its seed and the command that
# replays it. 2,000 seeds take 24 s of one CPU (22.9 s user + 1.0 s
# sys, measured; the target: at least 2,000 within 2 minutes), so the
# default, 10,000 (CI's), about five times that; the 1,000,000 commands
# a few seconds a run (docs/SIMULATION.md has the figures). Then
# SIM_STREAMS_SEEDS seeds over lull's streams with the fault shim under
# them (--streams): 2,000 take 54 s of one CPU (33.7 s user + 20.3 s sys,
# measured), 28 s per 1,000.
SEEDS ?= 10000
SIM_STREAMS_SEEDS ?= 2000
SIM_PLANT_SEEDS ?= 500
SIM_COMMANDS ?= 1000000
SIM = ./build/release/kv/lull-kv-sim

sim:
	$(CMAKE) -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
	$(CMAKE) --build build/release -j$(JOBS) --target lull-kv-sim
	$(SIM) $(if $(filter command line,$(origin SECONDS)),--seconds $(SECONDS),--seeds $(SEEDS))
	$(SIM) --streams --seeds $(SIM_STREAMS_SEEDS)
	for bug in resume-late ack-before-log lost-wakeup expire-relative \
	  multi-split chunk-edge int32 silent-resync expire-early \
	  batch-death expire-now same-length snapshot-ttl ltrim-off hincrby-set \
	  lrange-end setrange-shrink expire-gt exec-arity snap-list-batch \
	  resume-caught-up lrem-direction outf-resend ack-spin msetnx-partial \
	  lpos-tail expire-seconds smove-same zpop-past setstore-source \
	  zscore-exclusive zremrank-negative scan-skip blob-inplace resume-replid \
	  hollow-partition short-write-resend short-write-drop hollow-short-write \
	  publish-pattern scan-match-end flush-unlogged publish-unlogged \
	  publish-again; do \
	  $(SIM) --plant $$bug --expect-find $(SIM_PLANT_SEEDS) || exit 1; done
	$(CMAKE) -DPROGRAM=$(SIM) -DCOMMANDS=$(SIM_COMMANDS) \
	  -P kv/sim_determinism.cmake

# `make fuzz FUZZ_SECONDS=N`: the libFuzzer targets — fuzz_frame
# (a framed stream's decoder), fuzz_stream (a raw stream's reads cut at
# random points), fuzz_tls (a TLS server's handshake), fuzz_resp
# (lull-kv's parser), fuzz_cmd (lull-kv's commands) — built by clang under
# ASan+UBSan with the library coverage-instrumented, each run for N seconds
# on a copy of its seed corpus in build/fuzz/corpus. Any crash, leak,
# sanitizer report or input slower than 10 s fails; the input that did is
# left in build/fuzz/ (crash-*, leak-*, timeout-*). Skipped with a line
# without clang, or when clang cannot link a libFuzzer program under
# ASan+UBSan (Debian installs those runtimes, libclang-rt-N-dev, only as a
# recommendation of clang's).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = fuzz/fuzz_frame:fuzz/corpus_frame \
  fuzz/fuzz_stream:fuzz/corpus_stream \
  fuzz/fuzz_tls:fuzz/corpus_tls \
  kv/fuzz_resp:kv/fuzz_corpus \
  kv/fuzz_cmd:kv/fuzz_cmd_corpus
.PHONY: fuzz

fuzz:
	@if ! command -v clang >/dev/null 2>&1; then \
	  echo "fuzz: clang not installed, skipped"; exit 0; fi; \
	mkdir -p build/fuzz && \
	if ! printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
	    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return (int)(d[0] & n & 0); }' | \
	    clang -x c -fsanitize=fuzzer,address,undefined -o build/fuzz/probe - \
	    >build/fuzz/probe.log 2>&1; then \
	  echo "fuzz: clang cannot link libFuzzer under ASan+UBSan (build/fuzz/probe.log):" \
	    "their runtimes are missing (Debian: libclang-rt-$$(clang -dumpversion | cut -d. -f1)-dev), skipped"; \
	  exit 0; fi; \
	CC=clang $(CMAKE) -S . -B build/fuzz -DCMAKE_BUILD_TYPE=Debug \
	  -DLULL_SANITIZE=address,undefined -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link \
	  -DLULL_BUILD_LAB=OFF >/dev/null && \
	$(CMAKE) --build build/fuzz -j$(JOBS) --target fuzz_frame fuzz_stream fuzz_tls fuzz_resp fuzz_cmd && \
	for t in $(FUZZ_TARGETS); do \
	  bin=$${t%%:*}; seeds=$${t#*:}; name=$${bin##*/}; \
	  rm -rf build/fuzz/corpus/$$name && mkdir -p build/fuzz/corpus/$$name && \
	  cp $$seeds/* build/fuzz/corpus/$$name/ && \
	  echo "fuzz: $$name for $(FUZZ_SECONDS) s from $$(ls $$seeds | wc -l) seeds" && \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ./build/fuzz/$$bin -max_total_time=$(FUZZ_SECONDS) -timeout=10 -seed=1 \
	    -print_final_stats=1 -artifact_prefix=build/fuzz/$$name- \
	    build/fuzz/corpus/$$name 2>build/fuzz/$$name.log || \
	    { tail -n 60 build/fuzz/$$name.log; echo "fuzz: $$name FAILED"; exit 1; }; \
	  grep -E '^stat::number_of_executed_units' build/fuzz/$$name.log; \
	  echo "fuzz: $$name corpus $$(ls build/fuzz/corpus/$$name | wc -l) inputs"; \
	done

# The ABI baseline (abi/lull.abi, tests/abi_check.sh): `make abi-check`
# compares the debug build's library with it (ctest runs it too, as
# abi.check); `make abi-baseline` rewrites it from that library, for a
# change that NEWS.md records. Without libabigail's tools (the script
# exits 77) abi-check is skipped with the script's line; abi-baseline,
# which cannot do its work then, fails.
.PHONY: abi-check abi-baseline
abi-check abi-baseline:
	$(CMAKE) -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug >/dev/null
	$(CMAKE) --build build/debug -j$(JOBS) --target lull
	rc=0; $(if $(filter abi-baseline,$@),ABI_WRITE_BASELINE=1) sh tests/abi_check.sh \
	  build/debug/liblull.so . build/debug/tests/abi || rc=$$?; \
	if [ $$rc -eq 77 ]; then $(if $(filter abi-baseline,$@),echo \
	  "abi-baseline: abi/lull.abi not written: install abigail-tools"; exit 1,exit 0); fi; \
	exit $$rc
