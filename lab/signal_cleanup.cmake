# lab.signal_cleanup: lull-lab ended by SIGTERM, SIGHUP or SIGPIPE (its
# stdout a pipe whose reader left, lab/stdout_gone.cmake) while a
# scenario has files on disk removes them, then dies of that signal (the
# status a shell expects). The pump's journal directory (under $TMPDIR,
# its fdatasync'd files), the files scenario's (/dev/shm, up to 12,000
# names) and the TLS key of serve were left behind at every interrupted
# run, one more directory each time.
#
#   cmake -DLAB=path/to/lull-lab -DOUT=scratch/dir -P signal_cleanup.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DOUT=dir -P signal_cleanup.cmake")
endif()
set(failures "")
foreach(sig TERM HUP PIPE)
  set(tmp "${OUT}/${sig}")
  file(REMOVE_RECURSE "${tmp}")
  file(MAKE_DIRECTORY "${tmp}")
  # Started, then signalled once its journal directory holds a file;
  # prints the exit status and what is left in TMPDIR.
  execute_process(COMMAND sh -c "
    TMPDIR='${tmp}' \"$0\" pump --only journal --quick --rounds 1 >/dev/null 2>&1 &
    pid=$!; i=0
    while [ $i -lt 600 ] && ! ls '${tmp}'/lull-lab-journal-*/* >/dev/null 2>&1; do
      sleep 0.05; i=$((i + 1)); done
    kill -${sig} $pid; wait $pid; echo \"exit $?\"; ls -A '${tmp}'" "${LAB}"
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
  if(NOT out MATCHES "^exit (129|141|143)\n$")
    set(failures "${failures}\n  SIG${sig}: want exit 128+signal and TMPDIR empty, got:\n${out}")
  endif()
  file(REMOVE_RECURSE "${tmp}")
endforeach()
if(failures)
  message(FATAL_ERROR "lull-lab left files behind on a signal:${failures}")
endif()
message(STATUS "every temporary directory removed on SIGTERM, SIGHUP and SIGPIPE")
