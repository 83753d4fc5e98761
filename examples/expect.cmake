# Runs one example for CTest and checks both its exit status and its output
# (CTest's PASS_REGULAR_EXPRESSION alone would ignore the exit status).
#   cmake -DPROGRAM=<path> [-DARGS=<arg>] -DEXPECT=<regex> -P expect.cmake
# With -DEXPECT_RC=N the example must exit N instead of 0 (a refused
# argument), within 10 s, and EXPECT is matched against stderr too.
if(NOT DEFINED EXPECT_RC OR EXPECT_RC STREQUAL "")
  set(EXPECT_RC 0)
  set(limit)
else()
  set(limit TIMEOUT 10)
endif()
execute_process(COMMAND ${PROGRAM} ${ARGS} ${limit}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL EXPECT_RC)
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}, not ${EXPECT_RC}")
endif()
# A sanitizer's report fails the run whatever the exit status: an example
# that exits 1 on purpose exits 1 under ASan's leak check as well.
if("${out}${err}" MATCHES "ERROR: (Address|Leak|Thread)Sanitizer|runtime error:")
  message(FATAL_ERROR "${PROGRAM}: a sanitizer reported an error")
endif()
if(NOT EXPECT_RC EQUAL 0)
  set(out "${out}${err}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${PROGRAM}: no line matching \"${EXPECT}\"")
endif()
