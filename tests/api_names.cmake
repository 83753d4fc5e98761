# Every function lull.h exports is named lull_<type>_<...>: the type it acts
# on first, then a verb or, for a query, what it returns, as libuv's
# uv_<type>_<verb> (cmake -P, run by ctest as docs.api_names; docs/API.md,
# "Renamed in 1.0", states the rule and its exceptions). The types are the
# handles and objects of the header; the four calls that act on the library
# itself are listed by name. A new function that fits neither fails here,
# and the failure names it.
#   cmake -DSOURCE_DIR=<repo> -P tests/api_names.cmake
file(READ ${SOURCE_DIR}/include/lull.h header)
set(types loop task timer io notifier listener pump histogram endpoint udp fsevent dial tty
  loopback server stream pool work fs journal lookup percore process
  signal simnet simserver simconn tls)
set(library_calls lull_version lull_version_string lull_strerror lull_err_name)
string(REGEX MATCHALL "\nLULL_EXTERN [^;(#]*\\(" decls "${header}")
string(REPLACE ";" "|" type_alt "${types}")
set(bad "")
set(count 0)
foreach(decl ${decls})
  string(REGEX REPLACE ".*[ *]([a-z_0-9]+)[ ]*\\($" "\\1" name "${decl}")
  if(name STREQUAL "__attribute__" OR name STREQUAL "")
    continue()
  endif()
  math(EXPR count "${count} + 1")
  list(FIND library_calls ${name} lib)
  if(lib GREATER -1)
    continue()
  endif()
  if(NOT name MATCHES "^lull_(${type_alt})_[a-z0-9_]+$")
    list(APPEND bad ${name})
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "not named lull_<type>_<verb> (types: ${types}): ${bad}")
endif()
message(STATUS "lull.h: all ${count} exported functions are lull_<type>_<verb>")
