# lab.low_nproc: under a low RLIMIT_NPROC (`ulimit -u 20`) the runner
# scenario is not run, with the limit named on stdout. `--only check`,
# which is nothing but that check, fails with the error fork would have
# met: it said "lull-lab: runner failed: Too many open files", a limit
# that was not the one short. The timed run, like serve under a low
# ulimit -n (lab/serve_low_nofile.cmake), says so and exits 0.
#
#   cmake -DLAB=path/to/lull-lab -P low_nproc.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P low_nproc.cmake")
endif()
# dash's ulimit has no -u: util-linux's prlimit sets it.
find_program(PRLIMIT prlimit)
if(NOT PRLIMIT)
  message(STATUS "no prlimit on PATH: nothing to check")
  return()
endif()
# args;exit status;stderr
foreach(case "--only check|1|^lull-lab: runner failed: Resource temporarily unavailable\n$"
    "--quick|0|^$")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 args)
  list(GET parts 1 want)
  list(GET parts 2 want_err)
  separate_arguments(argv UNIX_COMMAND "${args}")
  execute_process(COMMAND ${PRLIMIT} --nproc=20:20 ${LAB} runner ${argv}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL want OR NOT out MATCHES "RLIMIT_NPROC allows 20"
     OR NOT err MATCHES "${want_err}")
    message(FATAL_ERROR "lull-lab runner ${args} under ulimit -u 20: exit ${rc} "
      "(want ${want}), want the limit named and stderr /${want_err}/, got:\n${out}${err}")
  endif()
endforeach()
message(STATUS "runner under ulimit -u 20: not run, RLIMIT_NPROC named")
