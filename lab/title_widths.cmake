# lab.title_widths: every fixed line of lull-lab's short output, each of
# its variants (`lull-lab titles`: the titles of every scenario, the
# floor table's with the kernel's system-call count and with the
# server's own, the verdict's), fits in 100 columns. A unit test over
# the strings: whatever this machine exposes (tracefs, io_uring, the
# peers), every variant is checked. On failure it prints the lines over.
#
#   cmake -DLAB=path/to/lull-lab -P title_widths.cmake
cmake_minimum_required(VERSION 3.19)
include(${CMAKE_CURRENT_LIST_DIR}/text.cmake)
execute_process(COMMAND ${LAB} titles OUTPUT_VARIABLE text
  ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "lull-lab titles exited ${rc}: ${err}")
endif()
lab_lines("${text}" lines)
set(over "")
set(n 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  math(EXPR n "${n} + 1")
  lab_width("${line}" width)
  if(width GREATER 100)
    string(APPEND over "  ${width} columns: ${line}\n")
  endif()
endforeach()
if(over)
  message(FATAL_ERROR "lines of lull-lab's output over 100 columns:\n${over}")
endif()
if(n LESS 8)
  message(FATAL_ERROR "lull-lab titles printed ${n} lines:\n${text}")
endif()
message(STATUS "${n} title lines, each within 100 columns")
