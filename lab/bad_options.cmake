# lab.bad_options: every option lull-lab cannot honour is refused at once,
# with one line on stderr that names it and exit status 2 (1 when stdout
# cannot be written), before anything is measured and with no table on
# stdout. Each case once held a surprise:
#   --rounds with no value     "unknown argument '--rounds'"
#   --rounds 5x, --sessions N  read by atoi: 5, or an overflowed count
#   --only nosuchfigure        a scenario ran nothing, printed a verdict of
#                              "not run" lines and exited 0; pump,
#                              loopback and replicate ran everything
#   --kv /nonexistent, --kv "" serve "skipped" and exited 0
#   --plot /nonexistent/x.svg  found only after the whole run
#   stdout closed (>&-)        a socket took fd 1; libuv aborted
#   stdout /dev/full           every table lost, exit 0
#   --json /dev/full           found after the whole run, as "Input/output
#                              error"
#   soak --seconds abc         one pass, "soak: ok"
#
#   cmake -DLAB=path/to/lull-lab -P bad_options.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P bad_options.cmake")
endif()
set(failures "")

# case(<want rc> <stderr regex> <arg>...)
function(case want pattern)
  execute_process(COMMAND ${LAB} ${ARGN} RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  string(REPLACE ";" " " shown "${ARGN}")
  if(NOT rc STREQUAL want OR NOT err MATCHES "${pattern}" OR out MATCHES "verdict")
    set(failures "${failures}\n  lull-lab ${shown}: exit ${rc} (want ${want}), stderr '${err}' (want /${pattern}/), stdout:\n${out}" PARENT_SCOPE)
  endif()
endfunction()

case(2 "^lull-lab: --rounds needs a value\n$" turns --rounds)
case(2 "^lull-lab: --only needs a value\n$" turns --quick --only)
case(2 "--rounds takes 1..64, not '0'" turns --rounds 0)
case(2 "--rounds takes 1..64, not '-1'" turns --rounds -1)
case(2 "--rounds takes 1..64, not '99999999999'" turns --rounds 99999999999)
case(2 "--rounds takes 1..64, not '5x'" turns --rounds 5x)
case(2 "--sessions takes 1..100000, not '0'" pump --sessions 0)
case(2 "--sessions takes 1..100000, not '4294967308'" pump --sessions 4294967308)
case(2 "--sessions takes 1..100000, not '100001'" pump --sessions 100001)
case(2 "turns has no figure 'nosuchfigure' \\(only: chain_task, chain_timer0, "
  turns --quick --only nosuchfigure)
case(2 "pump has no figure 'main' \\(only: journal\\)" pump --quick --only main)
case(2 "loopback has no figures to pick" loopback --quick --only rows)
case(2 "replicate has no figures to pick" replicate --quick --only x)
case(2 "serve has no figure 'x'" serve --quick --only x)
case(2 "udp has no figure 'x'" udp --quick --only x)
case(2 "files has no figure 'x'" files --quick --only x)
case(2 "runner has no figure 'x'" runner --quick --only x)
case(2 "--only picks a figure of one scenario" all --quick --only idle)
case(2 "--kv '/nonexistent/lull-kv': No such file" serve --quick --kv /nonexistent/lull-kv)
case(2 "--plot: cannot write '/nonexistent/dir/x.svg'" turns --quick --plot /nonexistent/dir/x.svg)
case(1 "cannot write /nonexistent/dir/x.json" turns --quick --json /nonexistent/dir/x.json)
if(EXISTS /dev/full)
  case(1 "^lull-lab: writing /dev/full: No space left on device\n$" turns --quick --json /dev/full)
endif()
case(2 "unknown argument '--bogus'" turns --bogus)
# The soak's own options: "abc" seconds ran one pass and said "ok"; a
# mistyped --seed ran seed 0, not the run asked for.
case(2 "soak: --seconds takes 0..1000000000, not 'abc'" soak --seconds abc)
case(2 "soak: --seconds takes 0..1000000000, not '1e20'" soak --seconds 1e20)
case(2 "soak: --seed takes a number, not '0x12g'" soak --seed 0x12g)
case(2 "soak: --seconds needs a value" soak --seconds)
case(2 "soak: --only takes one of: pump" soak --only nosuch)

# Empty values (CMake drops an empty argument, so through sh).
foreach(args "turns --rounds ''|--rounds takes 1..64, not ''"
    "serve --quick --kv ''|--kv '': empty path"
    "turns --quick --plot ''|--plot: cannot write '': empty file name")
  string(REPLACE "|" ";" parts "${args}")
  list(GET parts 0 cmd)
  list(GET parts 1 pattern)
  execute_process(COMMAND sh -c "\"${LAB}\" ${cmd}" RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "${pattern}")
    set(failures "${failures}\n  lull-lab ${cmd}: exit ${rc} (want 2), stderr '${err}'")
  endif()
endforeach()

# A --kv that exits at once, saying nothing: "lull-kv: exited at start: "
# ended with nothing after the colon. (Where redis-server or
# redis-benchmark is missing, serve is skipped and so is this case.)
execute_process(COMMAND ${LAB} serve --quick --only throughput --kv /bin/false
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT out MATCHES "serve skipped" AND (NOT rc EQUAL 1 OR
   NOT out MATCHES "lull-kv: exited at start: it printed nothing"))
  set(failures "${failures}\n  serve --kv /bin/false: exit ${rc} (want 1), stdout:\n${out}")
endif()

# stdout closed, and stdout on a device that is always full.
execute_process(COMMAND sh -c "\"${LAB}\" turns --quick --only virtual_clock >&-"
  RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 2 OR NOT err MATCHES "stdout is closed")
  set(failures "${failures}\n  stdout closed: exit ${rc} (want 2), stderr '${err}'")
endif()
if(EXISTS /dev/full)
  foreach(args "turns --quick --only virtual_clock" "--help")
    execute_process(COMMAND sh -c "\"${LAB}\" ${args} >/dev/full"
      RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 60)
    if(NOT rc EQUAL 1 OR NOT err MATCHES "writing to stdout failed")
      set(failures "${failures}\n  ${args} >/dev/full: exit ${rc} (want 1), stderr '${err}'")
    endif()
  endforeach()
endif()

if(failures)
  message(FATAL_ERROR "lull-lab accepted or mis-reported a bad option:${failures}")
endif()
message(STATUS "every bad option refused with its own message")
