# kv.bad_options: each option lull-kv refuses is named on stderr's first
# line with what it takes, and lull-kv exits 2 without listening. It
# printed the whole usage instead, and nothing said which option was
# wrong. --help on a full device is exit 1, not 0.
#
#   cmake -DKV=path/to/lull-kv -P bad_options.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT KV)
  message(FATAL_ERROR "usage: cmake -DKV=lull-kv -P bad_options.cmake")
endif()
set(failures "")
# Each: the arguments (through sh, so '' is an empty one) | stderr's
# first line.
set(cases
  "--bogus|lull-kv: unknown option '--bogus'"
  "''|lull-kv: unknown option ''"
  "--port|lull-kv: --port needs a value"
  "--port 0 --unix|lull-kv: --unix needs a value"
  "--port 0 --bind|lull-kv: --bind needs an address or more"
  "--port 0 --protected-mode maybe|lull-kv: --protected-mode takes yes or no, not 'maybe'"
  "--port 0 --max-bulk 0|lull-kv: --max-bulk takes a size of 1mb or more, not '0'"
  "--port 0 --client-query-buffer-limit 1x|lull-kv: --client-query-buffer-limit takes a size of 1mb or more, not '1x'"
  "--port 0 --proto-max-bulk-len 1|lull-kv: --proto-max-bulk-len takes a size of 1mb or more, not '1'"
  "--port 0 --client-query-buffer-limit 1048575|lull-kv: --client-query-buffer-limit takes a size of 1mb or more, not '1048575'"
  "--port 0 --replica-of nowhere|lull-kv: --replica-of takes HOST:PORT"
  "--port 0 --repl-mode fast|lull-kv: --repl-mode takes budget or per-record, not 'fast'"
  "--port 0 --repl-catchup x|lull-kv: --repl-catchup takes auto, thread or loop, not 'x'"
  "--port 0 --repl-backlog-size 1kb|lull-kv: --repl-backlog-size takes a size of 16kb or more, not '1kb'"
  "--port 0 --repl-snapshot disk|lull-kv: --repl-snapshot takes fork or inline, not 'disk'"
  "--port 0 --repl-sender-cpu -1|lull-kv: --repl-sender-cpu takes a CPU number 0-1023, not '-1'"
  "--port 0 --repl-sender-cpu ' 1'|lull-kv: --repl-sender-cpu takes a CPU number 0-1023, not ' 1'"
  "--port 0 --repl-sender-cpu +1|lull-kv: --repl-sender-cpu takes a CPU number 0-1023, not '+1'"
  "--port 0 --replica-of h:+1|lull-kv: --replica-of takes HOST:PORT"
  "--port 0 --replica-of 'h: 1'|lull-kv: --replica-of takes HOST:PORT"
  "--port 0 --client-output-buffer-limit normal 1|lull-kv: --client-output-buffer-limit takes CLASS HARD SOFT SECONDS"
  "--port 0 --client-output-buffer-limit normal 1 1 4294967296|lull-kv: --client-output-buffer-limit takes CLASS HARD SOFT SECONDS"
  "--port 0 --replica-of 127.0.0.1:0|lull-kv: --replica-of takes HOST:PORT"
  "--port 0 --tls-auth-clients x|lull-kv: --tls-auth-clients takes yes, no or optional, not 'x'"
  "--port 0 --maxmemory-clients 10%|lull-kv: --maxmemory-clients takes a size in bytes, 0 for none (no percentage), not '10%'"
  "--port 0 --maxmemory-clients -1|lull-kv: --maxmemory-clients takes a size in bytes, 0 for none (no percentage), not '-1'"
  "--port 0 --maxmemory-clients|lull-kv: --maxmemory-clients needs a value")
foreach(c IN LISTS cases)
  string(FIND "${c}" "|" bar)
  string(SUBSTRING "${c}" 0 ${bar} args)
  math(EXPR bar "${bar} + 1")
  string(SUBSTRING "${c}" ${bar} -1 want)
  execute_process(COMMAND sh -c "exec \"${KV}\" ${args}" RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 10)
  string(FIND "${err}" "${want}" at)
  if(NOT rc EQUAL 2 OR NOT at EQUAL 0 OR out MATCHES "listening")
    set(failures "${failures}\n  lull-kv ${args}: exit ${rc} (want 2), stderr:\n${err}  (want it to begin: ${want})")
  endif()
endforeach()
if(EXISTS /dev/full)
  execute_process(COMMAND sh -c "exec \"${KV}\" --help >/dev/full"
    RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 10)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "lull-kv: writing --help")
    set(failures "${failures}\n  lull-kv --help >/dev/full: exit ${rc} (want 1), stderr '${err}'")
  endif()
endif()
if(failures)
  message(FATAL_ERROR "lull-kv refused an option without saying which:${failures}")
endif()
message(STATUS "every refused option named, exit 2")
