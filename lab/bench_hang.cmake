# lab.bench_hang: a redis-benchmark that answers --version and then hangs
# (stuck, or not redis-benchmark at all). serve waited five minutes of
# silence on each of its runs, one after another: `serve --quick --only
# floors` (or suite) ran on for hours. Now the first run is killed after a
# silence far past any --quick run, with a line, and the later runs are
# not started. ONLY names the figure: floors (redis-benchmark on a pipe)
# or suite (on a terminal).
#
#   cmake -DLAB=path/to/lull-lab -DOUT=scratch/dir -DONLY=floors -P bench_hang.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB OR NOT OUT OR NOT ONLY)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DOUT=dir -DONLY=floors|suite -P bench_hang.cmake")
endif()
find_program(REDIS redis-server)
if(NOT REDIS)
  message(STATUS "no redis-server on PATH: serve does not run, nothing to check")
  return()
endif()
set(bin "${OUT}/bin")
file(REMOVE_RECURSE "${bin}")
file(WRITE "${bin}/redis-benchmark" "#!/bin/sh
[ \"$1\" = --version ] && { echo 'redis-benchmark 7.0.15'; exit 0; }
exec sleep 1000
")
file(CHMOD "${bin}/redis-benchmark" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
set(want "redis-benchmark printed nothing for [0-9]+ s: killed; its later runs not started")
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${bin}:$ENV{PATH}"
    ${LAB} serve --quick --only ${ONLY}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 55)
file(REMOVE_RECURSE "${bin}")
string(REGEX MATCHALL "its later runs not started" said "${out}")
list(LENGTH said n)
if(NOT rc MATCHES "^[01]$" OR NOT out MATCHES "${want}" OR NOT n EQUAL 1)
  message(FATAL_ERROR "serve --only ${ONLY} with a redis-benchmark that hangs: exit ${rc}, want /${want}/ once:\n${out}${err}")
endif()
message(STATUS "a hung redis-benchmark: killed once, its later runs not started")
