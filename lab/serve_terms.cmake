# lab.serve_terms: serve's short output defines what it uses before it
# uses it (LAB_LEGEND_TERMS, lab/text.cmake, read top to bottom as a
# newcomer reads `make demo`). Its tables' columns said "50 clients -P 1"
# and "-P 16", redis-benchmark's option for pipelining, defined nowhere
# in the output or the README. lab.verdict_shape checks a whole run this
# way too (minutes); this is serve's floors alone, in well under a minute.
#
#   cmake -DLAB=path/to/lull-lab -P serve_terms.cmake
cmake_minimum_required(VERSION 3.19)
include(${CMAKE_CURRENT_LIST_DIR}/text.cmake)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P serve_terms.cmake")
endif()
execute_process(COMMAND ${LAB} serve --quick --rounds 1 --only floors
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
if(out MATCHES "serve skipped")
  message(STATUS "serve skipped here (no redis-server or redis-benchmark): nothing to check")
  return()
endif()
if(NOT out MATCHES "-P 16")
  message(FATAL_ERROR "serve --only floors printed no -P column (exit ${rc}):\n${out}${err}")
endif()
lab_lines("${out}" lines)
lab_undefined_before_use("${lines}" early)
if(early)
  string(REPLACE ";" "\n  " early "${early}")
  message(FATAL_ERROR "used before the line that defines it:\n  ${early}\n${out}")
endif()
message(STATUS "serve's short output defines its terms before it uses them")
