# lab.serve_low_nofile: under `ulimit -n 64` (soft and hard) serve says
# it is not run and why, as runner does, and lull-lab exits 0. It ran:
# redis-server refused redis-benchmark's 50 clients ("max number of
# clients reached"), and the lines read "redis-benchmark against lull-kv
# failed: No child processes", then "serve failed", exit 1.
#
#   cmake -DLAB=path/to/lull-lab -P serve_low_nofile.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P serve_low_nofile.cmake")
endif()
execute_process(COMMAND sh -c
  "ulimit -n 64 && exec \"$0\" serve --quick --only throughput --rounds 1"
  "${LAB}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
  TIMEOUT 120)
if(out MATCHES "serve skipped: it needs lull-kv, redis-server")
  message(STATUS "no redis-server or redis-benchmark here: nothing to check")
  return()
endif()
if(NOT rc EQUAL 0 OR NOT out MATCHES
   "serve skipped: 50 clients need about [0-9]+ fds, and RLIMIT_NOFILE allows 64")
  message(FATAL_ERROR "lull-lab serve under ulimit -n 64: exit ${rc} (want "
    "0 and a line saying the fd limit is too low):\n${out}${err}")
endif()
message(STATUS "serve not run under ulimit -n 64, and says why")
