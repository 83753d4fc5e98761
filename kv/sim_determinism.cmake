# lull-kv-sim's determinism across processes, for CTest: one fault-free
# seed of N commands, run by two processes one after the other, must give
# the same trace hash (each run's every event, byte count, virtual instant
# and reply, hashed). Two runs in one process would share whatever a
# process fixes once (its heap's addresses, statics left over by the first
# run); two processes share none of it.
# With ARGS (one string, e.g. "--streams --seed 41"), that one seed's run
# instead, its faults and all.
#   cmake -DPROGRAM=<lull-kv-sim> -DCOMMANDS=<n> -P sim_determinism.cmake
#   cmake -DPROGRAM=<lull-kv-sim> -DARGS="<args>" -P sim_determinism.cmake
if(DEFINED ARGS)
  separate_arguments(args UNIX_COMMAND "${ARGS}")
  set(replay "${PROGRAM} ${ARGS}")
else()
  set(args --determinism ${COMMANDS} --once)
  set(replay "${PROGRAM} --first 1 --determinism ${COMMANDS} --once")
endif()
foreach(run 1 2)
  execute_process(COMMAND ${PROGRAM} ${args}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${PROGRAM} exited with ${rc}")
  endif()
  if(NOT out MATCHES "trace hash ([0-9a-f]+)")
    message(FATAL_ERROR "${PROGRAM}: no trace hash in its output")
  endif()
  set(hash${run} ${CMAKE_MATCH_1})
endforeach()
if(NOT hash1 STREQUAL hash2)
  message(FATAL_ERROR "two runs of one seed gave two traces: ${hash1} and "
    "${hash2}\nreplay: ${replay} --trace a.trace; the same with --trace "
    "b.trace; diff a.trace b.trace")
endif()
message("one seed, two processes, one trace: ${hash1}")
