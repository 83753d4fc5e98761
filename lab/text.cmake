# What lull-lab's text checks share (lab/verdict_shape.cmake,
# lab/title_widths.cmake, lab/no_undefined_terms.cmake).

# The columns a line takes: each non-ASCII character lull-lab prints takes
# one (CMake counts bytes); any other counts as its bytes, which can only
# fail a width check, never pass it.
function(lab_width line out)
  string(REGEX REPLACE "(×|÷|–|−|—|µ|→|←|✓|✗|…|≤|≥)" "." narrow "${line}")
  string(LENGTH "${narrow}" width)
  set(${out} ${width} PARENT_SCOPE)
endfunction()

# Words the project never uses (they name nothing a reader can look up):
# the outside design document's name and section labels, the old
# investigations by number, and the "seed tables" they were printed in.
# The polling pump, the zero-delay timer and the per-record yield are
# their names. (The name is spelt with a bracket, B[R]IEF, so that this
# file never uses the word it forbids.)
set(LAB_UNDEFINED_TERMS
  "B[R]IEF|[Ii]nvestigation|§|[Ss]eed table|(^|[^0-9A-Za-z_])1[ABC]([^0-9A-Za-z_]|$)")

# text's lines as a list (";" kept).
function(lab_lines text out)
  string(REPLACE ";" "\\;" escaped "${text}")
  string(REPLACE "\n" ";" lines "${escaped}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()

# Words of lull-lab's own that its short output must define before (or in)
# the line that first uses them, since a newcomer reads `make demo` top to
# bottom: "term: ..." at a line's start or after a space, "(" or ";". A
# floor is the same work with no loop library (its × is in the turns
# table's first column of figures), floor-bound a miss the floor makes too,
# "× per round" the median of the rounds' own ratios (a floor's 38.6 µs
# beside lull's 48.8 µs printed ×0.91, not ×0.79); p50, p99 and µs/s
# (CPU time per second) that a libuv user reads as latency or a rate; a
# hop (one run of a chain's task), the same policy a peer is set to, and
# a noisy miss, which only docs/BENCHMARKS.md defined; -P, redis-
# benchmark's pipelining, in serve's column heads. Plain words only:
# each is used in a regular expression as it is.
set(LAB_LEGEND_TERMS "floor" "floor-bound" "× per round" "p50" "p99" "µs/s"
  "hop" "same policy" "noisy" "commit" "-P")

# The terms of LAB_LEGEND_TERMS that lines (a list, lab_lines) use before
# defining, as "term: first line using it" items in out.
function(lab_undefined_before_use lines out)
  set(missing "")
  foreach(term IN LISTS LAB_LEGEND_TERMS)
    foreach(line IN LISTS lines)
      if(line MATCHES "(^|[ (;])${term}: ")
        break()
      elseif(line MATCHES "(^|[^-A-Za-z_])${term}([^-A-Za-z_]|$)")
        list(APPEND missing "${term}: ${line}")
        break()
      endif()
    endforeach()
  endforeach()
  set(${out} "${missing}" PARENT_SCOPE)
endfunction()
