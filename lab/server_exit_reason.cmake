# lab.server_exit_reason: a server serve starts that exits at once is
# reported with its last line, where a server says why it stops. Under a
# low ulimit -u redis-server printed its banner, then "Fatal: Can't
# initialize Background Jobs.", and lull-lab quoted the banner: "redis-
# server: exited at start: ... oO0OoO0OoO0Oo Redis is starting
# oO0OoO0OoO0Oo". A redis-server first on PATH stands in for it here
# (it answers --version as Redis does, then says that and exits 1).
#
#   cmake -DLAB=path/to/lull-lab -DOUT=scratch/dir -P server_exit_reason.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DOUT=dir -P server_exit_reason.cmake")
endif()
find_program(BENCH redis-benchmark)
if(NOT BENCH)
  message(STATUS "no redis-benchmark on PATH: serve does not run, nothing to check")
  return()
endif()
set(bin "${OUT}/bin")
file(REMOVE_RECURSE "${bin}")
file(WRITE "${bin}/redis-server" "#!/bin/sh
[ \"$1\" = --version ] && { echo 'Redis server v=7.0.15 sha=00000000:0'; exit 0; }
echo '1:C 07 Dec 2026 14:35:48.906 # oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo'
echo '1:M 07 Dec 2026 14:35:48.906 # Fatal: Can not initialize Background Jobs.'
exit 1
")
file(CHMOD "${bin}/redis-server" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${bin}:$ENV{PATH}"
    ${LAB} serve --quick --only throughput
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 50)
file(REMOVE_RECURSE "${bin}")
if(NOT out MATCHES "redis-server: exited at start: [^\n]*Fatal: Can not initialize Background Jobs\\.")
  message(FATAL_ERROR "the redis-server that exited is not quoted by its reason (exit ${rc}):\n${out}${err}")
endif()
message(STATUS "a server that exits at start is quoted by its last line")
