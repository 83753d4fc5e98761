# lab.verdict_shape (ctest): the shape of what `make demo` prints, on a
# quick run of every scenario (one round each). The figures themselves are
# not checked (a debug build on a busy machine measures nothing useful);
# the shape is:
#   - lull-lab exits 0 (every delivered-data check passed);
#   - at most 79 lines besides noisy marks' reasons and the busy-machine
#     lines (`make demo` adds its build line: 80), none wider than 100 columns (code points, not
#     bytes), no undefined term
#     (lab/text.cmake), no word of lull-lab's own before its definition,
#     and none of a table it leaves out (udp's "dg", files' "bare pool");
#   - a verdict of at most 28 lines (reasons aside) with a line for each contract C1-C8
#     and each scenario (pump, loopback, replicate, serve, runner), each
#     ending in ✓, ✗, "✗ noisy", "✗ floor-bound (floor ×F)" or "not run",
#     no cell cut short ("…"), and a reason line for every noisy mark;
#   - the same verdict in the JSON, and a busy-machine line above it
#     exactly when the JSON marks a scenario noisy, counting them;
#   - --verbose prints the long tables the short output leaves out;
#   - --strict exits 3 exactly when a miss is not marked noisy.
#
#   cmake -DLAB=path/to/lull-lab -DOUT=dir -P verdict_shape.cmake
cmake_minimum_required(VERSION 3.19) # string(JSON)
if(NOT LAB OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DOUT=dir -P verdict_shape.cmake")
endif()
file(MAKE_DIRECTORY ${OUT})

execute_process(COMMAND ${LAB} all --quick --rounds 1 --json ${OUT}/shape.json
  OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
file(WRITE ${OUT}/shape.txt "${text}")
if(NOT rc EQUAL 0)
  # The failing check prints its own line (lab_check_failed), on stdout
  # among the tables: that line and stderr, not the whole run.
  string(REGEX MATCHALL "[^\n]*CHECK FAILED[^\n]*" failed "${text}")
  list(JOIN failed "\n" failed)
  message(FATAL_ERROR "lull-lab all --quick exited ${rc} (its output: "
    "${OUT}/shape.txt):\n${failed}\n${err}")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/text.cmake)
lab_lines("${text}" lines)
set(in_verdict OFF)
set(verdict_lines 0)
set(verdict_text "")
list(LENGTH lines nlines)
if(text MATCHES "\n$")
  math(EXPR nlines "${nlines} - 1")
endif()
set(noisy_marks 0)
set(noisy_reasons 0)
set(busy_lines 0)
set(busy_said "")
foreach(line IN LISTS lines)
  # The busy-machine lines above the verdict (and the blank line before
  # them) are the machine's, as the noisy reasons are.
  if(line MATCHES "^busy machine in ([0-9]+) of [0-9]+ scenarios? ")
    set(busy_said ${CMAKE_MATCH_1})
    math(EXPR busy_lines "${busy_lines} + 2")
  elseif(line MATCHES "^  a miss may be the machine's")
    math(EXPR busy_lines "${busy_lines} + 1")
  endif()
  lab_width("${line}" width)
  if(width GREATER 100)
    message(FATAL_ERROR "a line of ${width} columns (over 100):\n${line}")
  endif()
  if(line MATCHES "${LAB_UNDEFINED_TERMS}")
    message(FATAL_ERROR "a term the project does not define:\n${line}")
  endif()
  if(line MATCHES "^verdict: ")
    set(in_verdict ON)
  elseif(line MATCHES "^figures written")
    set(in_verdict OFF)
  endif()
  if(in_verdict)
    math(EXPR verdict_lines "${verdict_lines} + 1")
    string(APPEND verdict_text "${line}\n")
    if(NOT line MATCHES "^(verdict: |contract |noisy )" AND
       NOT line MATCHES "(✓|✗|✗ noisy|✗ floor-bound \\(floor ×[0-9.]+\\)|not run)$")
      message(FATAL_ERROR "a verdict line without a result:\n${line}")
    endif()
    if(line MATCHES "…")
      message(FATAL_ERROR "a verdict cell cut short:\n${line}")
    endif()
    # udp and files print their verdict lines alone: no word of their
    # tables' own ("CPU/dg", "bare pool" were defined nowhere in it).
    if(line MATCHES "/dg|bare pool")
      message(FATAL_ERROR "a word of a table the output leaves out:\n${line}")
    endif()
    if(line MATCHES "✗ noisy$")
      math(EXPR noisy_marks "${noisy_marks} + 1")
    elseif(line MATCHES "^noisy ")
      math(EXPR noisy_reasons "${noisy_reasons} + 1")
    endif()
  endif()
endforeach()
# lull-lab's own words (floor, floor-bound, × per round) are defined at or
# before their first use: the turns table's "floor, ×" came lines before
# the loopback title said what a floor is, and floor-bound nowhere.
lab_undefined_before_use("${lines}" early)
if(early)
  string(REPLACE ";" "\n  " early "${early}")
  message(FATAL_ERROR "used before the output defines it:\n  ${early}")
endif()
# The bounds leave out the noisy marks' reason lines: how many there are
# is the machine's, not the output's (a busy CI machine adds them).
math(EXPR own_lines "${nlines} - ${noisy_reasons} - ${busy_lines}")
if(own_lines GREATER 79)
  message(FATAL_ERROR "${own_lines} lines besides ${noisy_reasons} noisy "
    "reasons and ${busy_lines} busy-machine lines (over 79; ${OUT}/shape.txt)")
endif()
if(NOT noisy_marks EQUAL noisy_reasons)
  message(FATAL_ERROR "${noisy_marks} noisy marks, ${noisy_reasons} reasons:\n"
    "${verdict_text}")
endif()
if(verdict_lines EQUAL 0)
  message(FATAL_ERROR "no verdict in ${OUT}/shape.txt")
endif()
# 28: a line for each of the eleven contract and scenario rows' targets
# (udp and files one each in the demo) and its header, besides the noisy
# reasons; the whole output's 79 lines above are the bound that matters.
math(EXPR verdict_own "${verdict_lines} - ${noisy_reasons}")
if(verdict_own GREATER 28)
  message(FATAL_ERROR "a verdict of ${verdict_lines} lines (over 28):\n${verdict_text}")
endif()
foreach(id C1 C2 C3 C4 C5 C6 C7 C8 pump loopback replicate serve runner udp files)
  if(NOT verdict_text MATCHES "\n${id} ")
    message(FATAL_ERROR "no verdict line for ${id}:\n${verdict_text}")
  endif()
endforeach()

file(READ ${OUT}/shape.json json)
# The busy-machine line counts the scenarios the JSON marks noisy, and is
# there whenever one is.
string(JSON nnoise LENGTH "${json}" noise)
set(busy_json 0)
if(nnoise GREATER 0)
  math(EXPR last "${nnoise} - 1")
  foreach(i RANGE ${last})
    string(JSON scenario MEMBER "${json}" noise ${i})
    string(JSON noisy GET "${json}" noise ${scenario} noisy)
    if(noisy)
      math(EXPR busy_json "${busy_json} + 1")
    endif()
  endforeach()
endif()
if(busy_json GREATER 0 AND NOT busy_said STREQUAL "${busy_json}")
  message(FATAL_ERROR "the JSON marks ${busy_json} scenarios noisy; the output "
    "said '${busy_said}' (${OUT}/shape.txt)")
elseif(busy_json EQUAL 0 AND NOT busy_said STREQUAL "")
  message(FATAL_ERROR "a busy-machine line, and no scenario noisy in the JSON")
endif()
string(JSON nverdict LENGTH "${json}" verdict)
set(ids "")
math(EXPR last "${nverdict} - 1")
foreach(i RANGE ${last})
  string(JSON id GET "${json}" verdict ${i} id)
  string(JSON status GET "${json}" verdict ${i} status)
  if(NOT status MATCHES "^(met|missed|not run)$")
    message(FATAL_ERROR "verdict ${id} in the JSON: status '${status}'")
  endif()
  list(APPEND ids ${id})
endforeach()
foreach(id C1 C2 C3 C4 C5 C6 C7 C8 pump loopback replicate serve runner)
  if(NOT id IN_LIST ids)
    message(FATAL_ERROR "no verdict line for ${id} in ${OUT}/shape.json")
  endif()
endforeach()

# --verbose prints a figure's whole table; the short output does not.
execute_process(COMMAND ${LAB} turns --quick --rounds 1 --only virtual_clock
  OUTPUT_VARIABLE short RESULT_VARIABLE rc)
execute_process(COMMAND ${LAB} turns --quick --rounds 1 --only virtual_clock
  --verbose OUTPUT_VARIABLE verbose RESULT_VARIABLE rc_v)
if(NOT rc EQUAL 0 OR NOT rc_v EQUAL 0)
  message(FATAL_ERROR "lull-lab turns --only virtual_clock exited ${rc}/${rc_v}")
endif()
if(short MATCHES "\\(7\\) virtual clock" OR NOT verbose MATCHES "\\(7\\) virtual clock")
  message(FATAL_ERROR "--verbose and the short output are not told apart:\n"
    "short:\n${short}\nverbose:\n${verbose}")
endif()
# --verbose ("every legend") uses ×, floor and p50 as the short output
# does, and must define them as it does: it printed no legend at all.
lab_lines("${verbose}" vlines)
lab_undefined_before_use("${vlines}" vearly)
if(NOT verbose MATCHES "× = the other's cost" OR vearly)
  string(REPLACE ";" "\n  " vearly "${vearly}")
  message(FATAL_ERROR "--verbose without the legend:\n  ${vearly}\n${verbose}")
endif()
# --strict exits 3 exactly when a line was missed and not marked noisy. The
# loopback's line against Node at equal policy is a miss on any machine
# (lull is about 5× cheaper there, the target ×10), so this exercises the
# exit whichever way the machine's noise marks it.
execute_process(COMMAND ${LAB} loopback --quick --rounds 1 --strict
  --json ${OUT}/strict.json OUTPUT_VARIABLE strict_out RESULT_VARIABLE rc)
file(READ ${OUT}/strict.json sjson)
string(JSON ns LENGTH "${sjson}" verdict)
math(EXPR last "${ns} - 1")
set(want 0)
foreach(i RANGE ${last})
  string(JSON status GET "${sjson}" verdict ${i} status)
  string(JSON noisy GET "${sjson}" verdict ${i} noisy)
  if(status STREQUAL "missed" AND NOT noisy)
    set(want 3)
  endif()
endforeach()
if(NOT rc EQUAL want)
  message(FATAL_ERROR "--strict exited ${rc}, the verdict says ${want}:\n${strict_out}")
endif()
message(STATUS "verdict: ${verdict_lines} lines, ${nverdict} in the JSON; --strict exit ${rc}")
