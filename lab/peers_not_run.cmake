# lab.peers_not_run: a peer lull-lab cannot run is named, with the reason,
# in the short output of the scenarios whose tables compare with it (turns,
# loopback), not only under --verbose. On a machine without libuv, libev,
# libevent or Node the turns table's peer column was "–" throughout and the
# verdict said "no peer ran", with no word of why. Here PATH holds no
# node, and the libraries not built in are the ones BUILT (this build's
# LAB_HAVE_* definitions, comma-separated) leaves out.
#
#   cmake -DLAB=path/to/lull-lab "-DBUILT=LAB_HAVE_UV,..." -P peers_not_run.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DBUILT=defs -P peers_not_run.cmake")
endif()
string(REPLACE "," ";" BUILT "${BUILT}")
set(missing "")
foreach(peer uv ev event)
  string(TOUPPER ${peer} up)
  if(NOT LAB_HAVE_${up} IN_LIST BUILT)
    list(APPEND missing lib${peer})
  endif()
endforeach()
list(JOIN missing ", " missing)
foreach(run "turns;--only;virtual_clock" "loopback")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PATH=/nonexistent
    ${LAB} ${run} --quick --rounds 1
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  list(GET run 0 name)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lull-lab ${name} exited ${rc}:\n${out}${err}")
  endif()
  # The lines right under the scenario's title.
  string(REGEX MATCH "\n${name}: [^\n]*\n(  [^\n]*: not run \\([^\n]*\\)\n)*" said "${out}")
  if(NOT said MATCHES "\n  node: not run \\(`node` not on PATH\\)\n")
    message(FATAL_ERROR "lull-lab ${name}: no line saying Node was not run "
      "and why under its title:\n${out}")
  endif()
  if(missing AND NOT said MATCHES
      "\n  ${missing}: not run \\(not found when lull-lab was built\\)\n")
    message(FATAL_ERROR "lull-lab ${name}: no line saying ${missing} "
      "were not run and why under its title:\n${out}")
  endif()
  if(NOT missing AND said MATCHES "not found when lull-lab was built")
    message(FATAL_ERROR "lull-lab ${name}: a peer built in said missing:\n${out}")
  endif()
endforeach()
message(STATUS "turns and loopback say which peers did not run and why")
