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
  # Prints "left PID" when the Node child, 1 s after lull-lab ended, is
  # neither gone nor dying: SIGKILL pending (SigPnd bit 9) or its exit
  # begun (PF_EXITING, 0x4 in stat's flags), zombie or reaped. lull-lab's
  # exit sends that SIGKILL before `wait` returns, but a loaded machine
  # may take seconds to finish a dying Node's exit. An orphaned Node lives
  # on for its 2 s idle figure at least, once its runners run (before,
  # it dies on their failed spawn). Each look reads the state once.
  execute_process(COMMAND sh -c "
    \"$0\" runner --only node >/dev/null 2>&1 & pid=$!; i=0; r=
    while [ $i -lt 600 ] && [ -z \"$r\" ]; do
      n=$(pgrep -P $pid -x node) && r=$(pgrep -P $n)
      sleep 0.05; i=$((i + 1)); done
    [ -n \"$r\" ] || { echo 'no node child seen'; kill $pid; exit 0; }
    kill -${sig} $pid; wait $pid; i=0
    while [ $i -lt 10 ]; do
      st=$(cat /proc/$n/stat 2>/dev/null) || exit 0
      set -- $st; [ \"$3\" = Z ] && exit 0
      [ $(($9 & 4)) -ne 0 ] && exit 0
      pnd=$(sed -n 's/^SigPnd:\t*//p' /proc/$n/status 2>/dev/null)
      [ -z \"$pnd\" ] || [ $((0x$pnd & 0x100)) -ne 0 ] && exit 0
      sleep 0.1; i=$((i + 1)); done
    echo \"left $n\"; kill -9 $n" "${LAB}"
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
  if(out MATCHES "left")
    set(failures "${failures}\n  SIG${sig}: the Node child outlived lull-lab (${out})")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "lull-lab left a peer running:${failures}")
endif()
message(STATUS "no Node child outlives lull-lab")
