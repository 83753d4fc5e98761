# lab.verdict_rules: how a miss reads (lab/engine.h), on the made-up
# verdict `lull-lab titles` prints, so no machine's noise decides it:
#   C1  missed by 2×, a peer moved 3× in the same rounds   ✗ noisy, a reason
#   C2  the same, but a peer met the target                ✗
#   C3  the floor misses the bound too                     ✗ floor-bound (floor ×1.7),
#                                                          target restated
#       ... and another bound missed besides               ✗
#   C4  missed by 1.5×, the floor moved 1.2×               ✗
#   C5  a count missed (no size), a peer moved 50×         ✗
#   C6  the floor moved 4× before a bound met; Node 1.1×
#       before the bound missed by 1.5×                    ✗
#       ×10 below Node missed, the floor only ×8 below     ✗ floor-bound (floor ×1.2),
#                                                          target restated
#   C7  met ✓; C8 not run
# On failure it prints the sample verdict.
#
#   cmake -DLAB=path/to/lull-lab -P verdict_rules.cmake
cmake_minimum_required(VERSION 3.19)
include(${CMAKE_CURRENT_LIST_DIR}/text.cmake)
execute_process(COMMAND ${LAB} titles OUTPUT_VARIABLE text RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "lull-lab titles exited ${rc}")
endif()
string(FIND "${text}" "\n\nverdict: " at)
if(at LESS 0)
  message(FATAL_ERROR "no sample verdict in lull-lab titles:\n${text}")
endif()
string(SUBSTRING "${text}" ${at} -1 sample)

set(expect
  "\nC1 [^\n]*  ✗ noisy\n"
  "\nC2 [^\n]*[^y]  ✗\n"
  "\nC3 [^\n]*p99 ≤ 0.57× floor  +✗ floor-bound \\(floor ×1.7\\)\n +notify: p50 80[^\n]*[^)]  ✗\n"
  "\nC4 [^\n]*[^y]  ✗\n"
  "\nC5 [^\n]*[^y]  ✗\n"
  "\nC6 [^\n]*[^y]  ✗\n +notify: p50 13.1[^\n]*p50 ≤ 0.8× floor  +✗ floor-bound \\(floor ×1.2\\)\n"
  "\nC7 [^\n]*  ✓\n"
  "\nC8 [^\n]*not run\n"
  "\nnoisy C1: libevent's idle CPU moved 3.00× [^\n]*missed by 2.00×\n")
foreach(re IN LISTS expect)
  if(NOT sample MATCHES "${re}")
    message(FATAL_ERROR "the sample verdict does not match '${re}':\n${sample}")
  endif()
endforeach()
string(REGEX MATCHALL "\nnoisy " reasons "${sample}")
list(LENGTH reasons n)
if(NOT n EQUAL 1 OR sample MATCHES "…")
  message(FATAL_ERROR "${n} noisy reasons (want 1), or a cell cut:\n${sample}")
endif()
message(STATUS "the sample verdict reads as the rules say")
