# The README's example compiles, runs and prints what it says (cmake -P,
# run by ctest as docs.readme_example): the first ```c block of README.md,
# built against this build's library.
#   cmake -DSOURCE_DIR=<repo> -DCC=<compiler> -DLIB=<liblull.a> -DWORK=<dir>
#         -P tests/readme_example.cmake
file(READ ${SOURCE_DIR}/README.md readme)
string(FIND "${readme}" "```c\n" start)
if(start LESS 0)
  message(FATAL_ERROR "README.md has no ```c block")
endif()
math(EXPR start "${start} + 5")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```" stop)
string(SUBSTRING "${rest}" 0 ${stop} code)
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/readme_example.c "${code}")
execute_process(COMMAND ${CC} -std=c11 -Wall -Wextra -Werror
  -I${SOURCE_DIR}/include -o ${WORK}/readme_example ${WORK}/readme_example.c
  ${LIB} -pthread RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "README example does not build:\n${err}")
endif()
execute_process(COMMAND ${WORK}/readme_example RESULT_VARIABLE rc
  OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "README example exited ${rc}:\n${out}")
endif()
if(NOT out MATCHES "^hello, a turn later\nthe 1 ms timer fired after [1-9][0-9]*\\.[0-9]+ ms\n$")
  message(FATAL_ERROR "README example printed:\n${out}")
endif()
message(STATUS "README example:\n${out}")
