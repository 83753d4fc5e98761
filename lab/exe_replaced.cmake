# lab.exe_replaced: the runner scenario starts its runners from lull-lab's
# own binary. It named that binary by the path /proc/self/exe read at the
# start, so a lull-lab rebuilt or reinstalled while it ran (a full `all`
# takes half an hour) failed every runner: "spawning runner 1 of 12: No
# such file or directory", Node's rows too. Here a copy of lull-lab is
# removed as soon as the runner scenario has started: its runners must
# still run.
#
#   cmake -DLAB=path/to/lull-lab -DOUT=scratch/dir -P exe_replaced.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DOUT=dir -P exe_replaced.cmake")
endif()
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
file(COPY "${LAB}" DESTINATION "${OUT}")
get_filename_component(name "${LAB}" NAME)
execute_process(COMMAND sh -c "
  cd '${OUT}' || exit 1
  './${name}' runner --quick >out 2>err & pid=$!; i=0
  while [ $i -lt 600 ] && ! grep -q '^runner:' out 2>/dev/null; do
    sleep 0.05; i=$((i + 1)); done
  rm -f './${name}'
  wait $pid; echo \"exit $?\"; cat out err"
  OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
file(REMOVE_RECURSE "${OUT}")
if(NOT out MATCHES "^exit 0\n" OR out MATCHES "spawning runner|CHECK FAILED|printed no result")
  message(FATAL_ERROR "lull-lab's runners failed once its file was removed:\n${out}${err}")
endif()
message(STATUS "the runners start from the running binary, whatever became of its file")
