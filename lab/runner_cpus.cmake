# lab.runner_cpus (ctest): where the runner scenario's processes run. With
# two CPUs allowed or more, the transport is pinned to one and the runners
# to another, and every measurement says how busy each CPU was and what it
# cost per event; with one CPU, nothing is pinned and a line says so; an
# unknown --only and a LAB_RUNNER_FIFO that is no priority are refused.
#
#   cmake -DLAB=path/to/lull-lab -P runner_cpus.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P runner_cpus.cmake")
endif()

# The CPUs this process may use (a CI container may not allow CPU 0).
file(READ /proc/self/status status)
string(REGEX MATCH "Cpus_allowed_list:[ \t]*([0-9]+)" _ "${status}")
set(first ${CMAKE_MATCH_1})
cmake_host_system_information(RESULT ncpu QUERY NUMBER_OF_LOGICAL_CORES)

if(ncpu GREATER 1)
  execute_process(COMMAND ${LAB} runner --only check --verbose
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "runner --only check exited ${rc}:\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "CPUs: the transport on CPU [0-9]+, every runner on CPU [0-9]+")
    message(FATAL_ERROR "two CPUs or more, and nothing pinned:\n${out}")
  endif()
  if(NOT out MATCHES "lull notify, round 1: [^\n]*ns CPU / event, [0-9.]+ events / read; CPUs busy: transport's [0-9]+%, runners' [0-9]+%; steal [0-9.]+%")
    message(FATAL_ERROR "no CPU figures for a round:\n${out}")
  endif()
endif()

find_program(TASKSET taskset)
if(TASKSET AND NOT first STREQUAL "")
  execute_process(COMMAND ${TASKSET} -c ${first} ${LAB} runner --only check
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "one CPU: runner --only check exited ${rc}:\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "runner: not pinned: one CPU [(]${first}[)] allowed")
    message(FATAL_ERROR "one CPU, and no line saying nothing was pinned:\n${out}")
  endif()
else()
  message(STATUS "taskset not found: the one-CPU case not checked")
endif()

# A priority that is not one is refused, in a line, and nothing raised.
execute_process(COMMAND ${CMAKE_COMMAND} -E env LAB_RUNNER_FIFO=abc
    ${LAB} runner --only check
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "runner: LAB_RUNNER_FIFO=abc: not a priority 1-99, not raised")
  message(FATAL_ERROR "LAB_RUNNER_FIFO=abc: exit ${rc}:\n${out}\n${err}")
endif()

execute_process(COMMAND ${LAB} runner --only nonsense
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT err MATCHES "only: check, notify, floor, node")
  message(FATAL_ERROR "--only nonsense: exit ${rc}:\n${out}\n${err}")
endif()
message(STATUS "runner CPUs: pinned where two are allowed, said where one is")
