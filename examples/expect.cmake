# Runs one example for CTest and checks both its exit status and its output
# (CTest's PASS_REGULAR_EXPRESSION alone would ignore the exit status).
#   cmake -DPROGRAM=<path> [-DARGS=<arg>] -DEXPECT=<regex> -P expect.cmake
execute_process(COMMAND ${PROGRAM} ${ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${PROGRAM}: no line matching \"${EXPECT}\"")
endif()
