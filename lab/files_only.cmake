# lab.files_only: `lull-lab files --only fs_events` measures the events
# alone, and its output shows them, not the pool it left out. It printed
# the pool's table with every row "failed" (no row had run), and with
# --quick a verdict of "pool p50: not measured", "not run", and no word
# on the events it had measured.
#
#   cmake -DLAB=path/to/lull-lab -P files_only.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P files_only.cmake")
endif()
foreach(quick "" --quick)
  execute_process(COMMAND ${LAB} files ${quick} --rounds 1 --only fs_events
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0 OR out MATCHES "failed" OR out MATCHES "4 KiB pread round trip"
     OR NOT out MATCHES "fs events [0-9.]+/s, 0 lost"
     OR NOT out MATCHES "pool p50: not measured \\(--only\\)")
    message(FATAL_ERROR "files ${quick} --only fs_events: exit ${rc}:\n${out}${err}")
  endif()
endforeach()
message(STATUS "files --only fs_events shows the events, not the pool")
