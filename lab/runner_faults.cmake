# lab.runner_faults (ctest): the runner scenario's delivered-data checks can
# fail. Each fault makes runner 1 misbehave (lab/runner_child.c,
# LAB_RUNNER_FAULT); lull-lab must exit 1 and every transport that ran
# (lull's two modes, the floor, and Node's two when node is on PATH)
# must say what it found.
#
#   cmake -DLAB=path/to/lull-lab -P runner_faults.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P runner_faults.cmake")
endif()

# fault -> what every transport must report for runner 1
set(faults lose repeat corrupt exit)
set(want_lose "runner 1: event 4 where event 3 was due")
set(want_repeat "runner 1: event 3 where event 4 was due")
set(want_corrupt "runner 1: event 3: checksum wrong")
set(want_exit "runner 1 [(a-z0-9 ]*[)]? ?ended before its transport was done: status 3")

foreach(fault IN LISTS faults)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env LAB_RUNNER_FAULT=${fault}
      ${LAB} runner --only check
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 1)
    message(FATAL_ERROR "fault ${fault}: lull-lab exited ${rc}, not 1:\n${out}\n${err}")
  endif()
  set(rows "lull, 5 ms poll" "lull, notify" "floor: epoll_wait")
  if(out MATCHES "Node, event-driven")
    list(APPEND rows "Node, setInterval 5 ms" "Node, event-driven")
  endif()
  foreach(row IN LISTS rows)
    string(REPLACE "(" "[(]" row_re "${row}")
    if(NOT out MATCHES "${row_re}[^\n]*round 1: ${want_${fault}}")
      message(FATAL_ERROR "fault ${fault}: the ${row} row did not report "
        "'${want_${fault}}':\n${out}\n${err}")
    endif()
    if(NOT out MATCHES "CHECK FAILED: runner: ${row_re}")
      message(FATAL_ERROR "fault ${fault}: no failed check for ${row}:\n${out}")
    endif()
  endforeach()
  if(err MATCHES "lull_loop_free")
    message(FATAL_ERROR "fault ${fault}: a handle leaked:\n${err}")
  endif()
  list(LENGTH rows nrows)
  message(STATUS "fault ${fault}: caught by ${nrows} transports")
endforeach()
