# lab.tmpdir_paths: the pump's journal variant makes its files under
# $TMPDIR. A $TMPDIR of 72 characters or more failed it with
# "lull-lab: pump failed: Invalid argument" (the directory's name was cut
# to fit 96 bytes, and mkdtemp refused what was left); one that does not
# exist said "No such file or directory" and named nothing. Now a long
# $TMPDIR works and is left empty, and a missing one is named.
#
#   cmake -DLAB=path/to/lull-lab -DOUT=scratch/dir -P tmpdir_paths.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DOUT=dir -P tmpdir_paths.cmake")
endif()
set(failures "")
string(REPEAT "d" 100 d100)
set(long "${OUT}/${d100}/${d100}")
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${long}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env "TMPDIR=${long}"
    ${LAB} pump --only journal --quick --rounds 1
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
file(GLOB left "${long}/*")
if(NOT rc EQUAL 0 OR left)
  set(failures "${failures}\n  TMPDIR of 200-odd characters: exit ${rc} (want 0), left '${left}':\n${out}${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env "TMPDIR=${OUT}/missing"
    ${LAB} pump --only journal --quick --rounds 1
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
if(NOT rc EQUAL 1 OR NOT "${out}${err}" MATCHES "'${OUT}/missing' \\(\\$TMPDIR\\): No such file or directory")
  set(failures "${failures}\n  TMPDIR missing: exit ${rc} (want 1), want it named:\n${out}${err}")
endif()
file(REMOVE_RECURSE "${OUT}")
if(failures)
  message(FATAL_ERROR "the journal under an unusual TMPDIR:${failures}")
endif()
message(STATUS "a long TMPDIR works, a missing one is named")
