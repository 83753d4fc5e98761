# lab.peer_orphans: lull-lab killed (SIGTERM, or SIGKILL: nothing of its
# own runs) while Node measures a peer row takes that Node with it. Node
# ran on, orphaned, to the end of its measurement (runner.js spawning and
# driving its runners for seconds), then died on the closed pipe.
#
#   cmake -DLAB=path/to/lull-lab -P peer_orphans.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P peer_orphans.cmake")
endif()
find_program(NODE node)
if(NOT NODE)
  message(STATUS "no node on PATH: nothing to check")
  return()
endif()
set(failures "")
foreach(sig TERM KILL)
  # Prints "left PID" when the Node child outlives lull-lab by 2 s.
  execute_process(COMMAND sh -c "
    \"$0\" runner --only node >/dev/null 2>&1 & pid=$!; i=0; n=
    while [ $i -lt 600 ] && [ -z \"$n\" ]; do
      n=$(pgrep -P $pid -x node); sleep 0.05; i=$((i + 1)); done
    [ -n \"$n\" ] || { echo 'no node child seen'; kill $pid; exit 0; }
    kill -${sig} $pid; wait $pid; sleep 2
    if kill -0 $n 2>/dev/null && ! ps -o stat= -p $n | grep -q Z; then
      echo \"left $n\"; kill -9 $n; fi" "${LAB}"
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
  if(out MATCHES "left")
    set(failures "${failures}\n  SIG${sig}: the Node child outlived lull-lab (${out})")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "lull-lab left a peer running:${failures}")
endif()
message(STATUS "no Node child outlives lull-lab")
