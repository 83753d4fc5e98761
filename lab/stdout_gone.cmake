# lab.stdout_gone: `lull-lab all --quick | head -1` ends within seconds of
# head leaving, killed by SIGPIPE as any filter's writer is, saying
# nothing. It went on measuring for a minute or more (the whole first
# scenario, every round) before its next line's write found the pipe
# closed.
#
#   cmake -DLAB=path/to/lull-lab -P stdout_gone.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -P stdout_gone.cmake")
endif()
# lull-lab's exit status and the seconds from the reader's exit to
# lull-lab's. The reader stays 2 s, so that the lines lull-lab prints at
# once (the header, the title) are in the pipe before it leaves, as when
# head is slow to exit: the next write is then the table's.
execute_process(COMMAND sh -c "
  fifo=$(mktemp -u) && mkfifo \"$fifo\" || exit 1
  \"$0\" all --quick >\"$fifo\" 2>/dev/null & pid=$!
  { head -c 1 >/dev/null; sleep 2; } <\"$fifo\"; gone=$(date +%s)
  wait $pid; rc=$?; rm -f \"$fifo\"
  echo \"exit $rc after $(( $(date +%s) - gone )) s\"" "${LAB}"
  OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
string(REGEX MATCH "^exit ([0-9]+) after ([0-9]+) s" m "${out}")
if(NOT CMAKE_MATCH_1 STREQUAL "141" OR CMAKE_MATCH_2 GREATER 20)
  message(FATAL_ERROR "lull-lab all --quick | head -1: want death by "
    "SIGPIPE (141) within 20 s of head's exit, got: ${out}${err}")
endif()
message(STATUS "${out}")
