# bench.bad_args: a benchmark given a count it cannot take ("10x", "abc",
# "1e6", "-1", past its range) exits 2 with a line on stderr naming it,
# before measuring anything. atoi and strtoul ran them: work_roundtrip
# --cpu abc pinned to CPU 0, --trips 2147483647 overflowed an int,
# spawn_roundtrip --trips 10x ran 10 trips, hop_cost task 1e6 ran 1 hop.
#
#   cmake -DBIN=path/to/bench/dir -P bad_args.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT BIN)
  message(FATAL_ERROR "usage: cmake -DBIN=bench-dir -P bad_args.cmake")
endif()
set(failures "")
# Each: the program and its arguments | what stderr must hold.
set(cases
  "work_roundtrip --cpu abc|--cpu takes 0..1023, not 'abc'"
  "work_roundtrip --trips 10x|--trips takes 10..100000000, not '10x'"
  "work_roundtrip --trips 2147483647|--trips takes 10..100000000, not '2147483647'"
  "fs_roundtrip --rounds 0x5|--rounds takes 1..101, not '0x5'"
  "spawn_roundtrip --trips 10x|--trips takes 1..1000000, not '10x'"
  "spawn_roundtrip --rounds -1|--rounds takes 1..1000, not '-1'"
  "fsevent_scale 3x|ROUNDS takes 1..1000, not '3x'"
  "fsevent_scale 1 1e3|N takes 1..1000000, not '1e3'"
  "hop_cost task 1e6|N takes 1..1000000000000, not '1e6'"
  "remote_trip futex 10x|N takes 1..1000000000000, not '10x'"
  "should_yield abc|seconds per case takes a number above 0 and at most 3600, not 'abc'"
  "should_yield -1|seconds per case takes a number above 0 and at most 3600, not '-1'"
  "should_yield 1e309|seconds per case takes a number above 0 and at most 3600, not '1e309'"
  "timer_scale 4294967297|BASE takes 1..100000000, not '4294967297'"
  "timer_scale 1000 10x|EXTRA takes 1..100000000, not '10x'"
  "timer_scale 1000 100 1|ROUNDS takes 2..32, not '1'"
  "timer_scale --runs 0|--runs takes 1..32, not '0'")
foreach(c IN LISTS cases)
  string(FIND "${c}" "|" bar)
  string(SUBSTRING "${c}" 0 ${bar} args)
  math(EXPR bar "${bar} + 1")
  string(SUBSTRING "${c}" ${bar} -1 want)
  separate_arguments(argv UNIX_COMMAND "${args}")
  list(POP_FRONT argv prog)
  execute_process(COMMAND ${BIN}/${prog} ${argv} RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 20)
  string(FIND "${err}" "${want}" at)
  if(NOT rc EQUAL 2 OR at LESS 0)
    set(failures "${failures}\n  ${args}: exit ${rc} (want 2), stderr '${err}' (want: ${want})")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "a benchmark took a count it should refuse:${failures}")
endif()
message(STATUS "every bad count refused")
