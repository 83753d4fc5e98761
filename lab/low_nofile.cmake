# lab.low_nofile: under a low RLIMIT_NOFILE (`ulimit -n 64`) turns halves
# the idle figure's handles to fit, and its labels must say how many it
# measured: they said "10k" (the short table's "idle CPU per handle, 10k",
# C1's "10k idle: ...") for a figure of 2 handles. Each socket has a
# timer beside it and the figure is per handle, so the labels count both:
# N sockets are 2N handles (they said 10k for 20k, and 10k × the per-handle
# figure was half C1's CPU).
#
#   cmake -DLAB=path/to/lull-lab -P low_nofile.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P low_nofile.cmake")
endif()
execute_process(COMMAND sh -c
  "ulimit -n 64 && exec \"${LAB}\" turns --quick --only idle --rounds 1"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
string(REGEX MATCH "idle uses ([0-9]+) sockets" m "${out}")
set(n "${CMAKE_MATCH_1}")
if(NOT n STREQUAL "")
  math(EXPR handles "2 * ${n}")
endif()
if(NOT rc EQUAL 0 OR n STREQUAL "")
  message(FATAL_ERROR "lull-lab turns under ulimit -n 64: exit ${rc}, no "
    "\"idle uses N sockets\" line:\n${out}${err}")
endif()
if(out MATCHES "[12]0k" OR NOT out MATCHES "idle CPU per handle, ${handles} "
   OR NOT out MATCHES "C1 Quiet +${handles} idle: ")
  message(FATAL_ERROR "the idle figure measured ${handles} handles (${n} "
    "sockets, ${n} timers) but its labels say otherwise:\n${out}")
endif()
message(STATUS "the idle figure's labels say its ${handles} handles")
