# lab.one_cpu: `taskset -c 0 lull-lab turns --only roundtrip_2cpu` cannot
# run its figure (two threads on two CPUs), and must say so in the short
# output: it printed the title and a verdict whose lines read "turns did
# not measure it (see above)", with nothing above (the reason was in
# --verbose only). Skipped where taskset is not installed.
#
#   cmake -DLAB=path/to/lull-lab -P one_cpu.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P one_cpu.cmake")
endif()
find_program(TASKSET taskset)
if(NOT TASKSET)
  message(STATUS "taskset not found: skipped")
  return()
endif()
# The first CPU this process may run on: CPU 0 may not be one of them (a
# container's cpuset, a CI runner's taskset).
file(READ /proc/self/status status)
string(REGEX MATCH "Cpus_allowed_list:[ \t]*([0-9]+)" m "${status}")
if("${CMAKE_MATCH_1}" STREQUAL "")
  message(STATUS "no Cpus_allowed_list in /proc/self/status: skipped")
  return()
endif()
execute_process(COMMAND ${TASKSET} -c ${CMAKE_MATCH_1} ${LAB} turns --quick
  --rounds 1 --only roundtrip_2cpu RESULT_VARIABLE rc OUTPUT_VARIABLE out
  ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT out MATCHES
   "\n  roundtrip_2cpu: not run, this process may run on one CPU only\n")
  message(FATAL_ERROR "turns --only roundtrip_2cpu on one CPU: exit ${rc}, "
    "no line saying why it did not run:\n${out}${err}")
endif()
message(STATUS "on one CPU, the two-CPU figure says why it did not run")
