# lab.only_verdict: with --only FIGURE, the verdict lines that figure does
# not measure say so. They said "turns did not measure it (see above)"
# and "pump did not run (see above)", with nothing above to see, after the
# figure asked for had run and printed its table.
#
#   cmake -DLAB=path/to/lull-lab -P only_verdict.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P only_verdict.cmake")
endif()
set(failures "")
# scenario figure;a line of the verdict that must say --only
foreach(case "turns|virtual_clock|C1 Quiet +not measured \\(--only virtual_clock\\)"
    "pump|journal|pump +not measured \\(--only journal\\)")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 scenario)
  list(GET parts 1 figure)
  list(GET parts 2 want)
  execute_process(COMMAND ${LAB} ${scenario} --quick --rounds 1 --only ${figure}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
  if(NOT rc EQUAL 0 OR out MATCHES "see above" OR NOT out MATCHES "${want}")
    set(failures "${failures}\n  ${scenario} --only ${figure}: exit ${rc}, want /${want}/ and no \"see above\":\n${out}${err}")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "a verdict line misread --only:${failures}")
endif()
message(STATUS "--only: the lines not measured say --only")
