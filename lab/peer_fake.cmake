# lab.peer_fake: a `node` first on PATH that is not Node: one that hangs
# and one that exits at once, printing nothing. The hanging one hung
# lull-lab for good at `node --version`; the silent one was taken for
# Node, and each of its rows printed "CHECK FAILED: ... what was delivered
# is wrong", a failed check of lull's delivery, exit 1. Each must end with
# Node's rows not run and the reason named, no check failed, exit 0.
# Likewise a node that hangs only once it measures (below).
#
#   cmake -DLAB=path/to/lull-lab -DOUT=scratch/dir -P peer_fake.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DOUT=dir -P peer_fake.cmake")
endif()
set(failures "")
# kind;the node script's body;the reason lull-lab must print
foreach(fake
    "hangs|exec sleep 1000|[Nn]ode:? not run \\(`node --version` gave no answer in [0-9]+ s\\)"
    "silent|exit 0|[Nn]ode:? not run \\(`node --version` printed '', not a version\\)")
  string(REPLACE "|" ";" parts "${fake}")
  list(GET parts 0 kind)
  list(GET parts 1 body)
  list(GET parts 2 want)
  set(bin "${OUT}/${kind}")
  file(REMOVE_RECURSE "${bin}")
  file(WRITE "${bin}/node" "#!/bin/sh\n${body}\n")
  file(CHMOD "${bin}/node" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
  foreach(args "loopback --quick" "runner --quick --only node")
    separate_arguments(argv UNIX_COMMAND "${args}")
    execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${bin}:$ENV{PATH}"
        ${LAB} ${argv}
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 40)
    if(NOT rc EQUAL 0 OR NOT out MATCHES "${want}" OR
       "${out}${err}" MATCHES "CHECK FAILED")
      set(failures "${failures}\n  a node that ${kind}, lull-lab ${args}: exit ${rc} (want 0), want /${want}/ and no CHECK FAILED; stdout:\n${out}\nstderr:\n${err}")
    endif()
  endforeach()
  file(REMOVE_RECURSE "${bin}")
endforeach()
# A node that answers --version, then hangs in every measurement (as Node
# does under a low ulimit -u, its threads refused): lull-lab waited on
# each for good, and then judged lull "✗" against Node's missing figure.
# Now the first is killed after a silence far past any --quick
# measurement, with a line, Node's other rows are not run, and the line
# that compares with Node is "not run".
set(bin "${OUT}/stuck")
file(REMOVE_RECURSE "${bin}")
file(WRITE "${bin}/node"
  "#!/bin/sh\n[ \"$1\" = --version ] && { echo v20.0.0; exit 0; }\nexec sleep 1000\n")
file(CHMOD "${bin}/node" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
set(want "node printed nothing for [0-9]+ s: killed; Node's other rows not run")
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${bin}:$ENV{PATH}"
    ${LAB} loopback --quick
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 50)
string(REGEX MATCHALL "node printed nothing for" said "${out}")
list(LENGTH said n)
if(NOT rc EQUAL 0 OR NOT n EQUAL 1 OR "${out}${err}" MATCHES "CHECK FAILED"
   OR out MATCHES "vs Node[^\n]*✗")
  set(failures "${failures}\n  a node that hangs after --version, lull-lab loopback --quick: exit ${rc} (want 0), want /${want}/ once, no CHECK FAILED and no miss judged against Node; stdout:\n${out}\nstderr:\n${err}")
endif()
file(REMOVE_RECURSE "${bin}")

if(failures)
  message(FATAL_ERROR "lull-lab took a fake node for Node:${failures}")
endif()
message(STATUS "a node that hangs or says nothing: its rows not run, with the reason")
