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
