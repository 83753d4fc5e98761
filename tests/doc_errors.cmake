# For the calls listed below, every negative errno a test asserts as a
# return (CHECK_EQ(lull_x(...), -EXXX) in tests/test_*.c) is named in the
# call's docs/API.md entry and in its comment in lull.h, so that a caller
# who handles the documented errors handles every one the suite sees
# (cmake -P, run by ctest as docs.errors). A call joins the list once both
# of its docs name all of its tested errors; the failure names the call,
# the errno and the doc that lacks it.
#   cmake -DSOURCE_DIR=<repo> -P tests/doc_errors.cmake
cmake_minimum_required(VERSION 3.20)
set(calls lull_endpoint_send lull_stream_send_fds lull_udp_send)
file(READ ${SOURCE_DIR}/docs/API.md api)
file(READ ${SOURCE_DIR}/include/lull.h header)
file(GLOB tests ${SOURCE_DIR}/tests/test_*.c)
set(missing "")
set(checked 0)
foreach(call ${calls})
  # The API.md entry: from the "### " heading naming the call to the next
  # heading.
  string(REGEX MATCH "\n###[^\n]*[^a-z_0-9]${call}([^a-z_0-9][^\n]*)?\n[^#]*" entry "${api}")
  if(entry STREQUAL "")
    list(APPEND missing "${call}: no entry in docs/API.md")
    continue()
  endif()
  # lull.h: the comment right above the prototype, and the prototype.
  string(REGEX MATCH "/\\*([^*]|\\*[^/])*\\*/[ \n]*LULL_EXTERN [^;(]*[ *]${call}\\(" decl "${header}")
  if(decl STREQUAL "")
    list(APPEND missing "${call}: not declared in lull.h")
    continue()
  endif()
  set(seen "")
  foreach(t ${tests})
    file(READ ${t} src)
    # One statement each, up to its ';', which (with brackets) would split
    # or join CMake's list items: it becomes an ASCII 1, brackets parens.
    string(ASCII 1 end)
    string(REPLACE ";" "${end}" src "${src}")
    string(REPLACE "[" "(" src "${src}")
    string(REPLACE "]" ")" src "${src}")
    string(REGEX MATCHALL "CHECK_EQ\\([ \n]*${call}\\([^${end}]*" stmts "${src}")
    foreach(s ${stmts})
      if(s MATCHES "-(E[A-Z0-9]+)\\)[ \n]*$")
        list(APPEND seen ${CMAKE_MATCH_1})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES seen)
  if(seen STREQUAL "")
    list(APPEND missing "${call}: no test asserts an error of it")
  endif()
  foreach(e ${seen})
    math(EXPR checked "${checked} + 1")
    if(NOT entry MATCHES "-${e}[^A-Z0-9]")
      list(APPEND missing "${call}: -${e} (asserted by a test) not in docs/API.md")
    endif()
    if(NOT decl MATCHES "-${e}[^A-Z0-9]")
      list(APPEND missing "${call}: -${e} (asserted by a test) not in lull.h")
    endif()
  endforeach()
endforeach()
if(missing)
  string(REPLACE ";" "\n  " missing "${missing}")
  message(FATAL_ERROR "errors a test asserts that the docs do not name:\n  ${missing}")
endif()
string(REPLACE ";" ", " calls "${calls}")
message(STATUS "docs: ${checked} tested errors of ${calls} named in API.md and lull.h")
