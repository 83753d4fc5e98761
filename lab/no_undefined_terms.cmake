# lab.no_undefined_terms: no file of lull-lab (sources, scripts, its Node
# programs, these checks) and no fixed line of its output (`lull-lab
# titles`) uses a term the project does not define (LAB_UNDEFINED_TERMS,
# lab/text.cmake: say "the polling pump", "the zero-delay timer", "the
# per-record yield"), and the titles use no word of lull-lab's own before
# the line that defines it (LAB_LEGEND_TERMS: floor, floor-bound). lab.verdict_shape checks a whole run's output the
# same way. On failure it prints the offending lines, file:line.
#
#   cmake -DLAB=path/to/lull-lab -DSRC=lab -P no_undefined_terms.cmake
cmake_minimum_required(VERSION 3.19)
include(${CMAKE_CURRENT_LIST_DIR}/text.cmake)
file(GLOB_RECURSE files LIST_DIRECTORIES false
  ${SRC}/*.c ${SRC}/*.h ${SRC}/*.js ${SRC}/*.cmake ${SRC}/CMakeLists.txt)
set(found "")
foreach(f IN LISTS files)
  if(f STREQUAL "${CMAKE_CURRENT_LIST_DIR}/text.cmake")
    continue() # it spells the terms out to find them
  endif()
  file(STRINGS ${f} hits ENCODING UTF-8 REGEX "${LAB_UNDEFINED_TERMS}")
  foreach(hit IN LISTS hits)
    file(RELATIVE_PATH rel ${SRC} ${f})
    string(APPEND found "  ${rel}: ${hit}\n")
  endforeach()
endforeach()
if(LAB)
  execute_process(COMMAND ${LAB} titles OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lull-lab titles exited ${rc}")
  endif()
  lab_lines("${text}" lines)
  foreach(line IN LISTS lines)
    if(line MATCHES "${LAB_UNDEFINED_TERMS}")
      string(APPEND found "  lull-lab titles: ${line}\n")
    endif()
  endforeach()
  lab_undefined_before_use("${lines}" early)
  foreach(hit IN LISTS early)
    string(APPEND found "  lull-lab titles, used before its definition: ${hit}\n")
  endforeach()
endif()
if(found)
  message(FATAL_ERROR "terms the project does not define:\n${found}")
endif()
list(LENGTH files n)
message(STATUS "${n} files of lab/ and the titles: no undefined term")
