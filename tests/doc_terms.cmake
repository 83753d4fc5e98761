# The docs use no word they do not define (cmake -P, run by ctest as
# docs.no_undefined_terms): README.md and docs/*.md name the three problems
# the lab reproduces as the README defines them (the polling pump, the
# zero-delay timer, the per-record yield), never by the labels of the
# document that first listed them (its name, its labels "1A"/"1B"/"1C",
# "§", "investigation 1A", "seed tables"). A hit fails, naming file:line.
# The patterns spell the name with a bracket, so this file never uses it.
#   cmake -DSOURCE_DIR=<repo> -P tests/doc_terms.cmake
cmake_minimum_required(VERSION 3.20)
# Each pattern, and what to say about it.
set(patterns
  "(^|[^A-Za-z])B[R]IEF([^A-Za-z]|$)"
  "(^|[^0-9A-Za-z_])1[ABC]([^0-9A-Za-z_]|$)"
  "§"
  "[Ii]nvestigation[s]? [0-9]"
  "[Ss]eed[ -]tables?")
# The docs, and the code and build files around them (comments and
# strings): the repository defines every word it uses.
file(GLOB docs ${SOURCE_DIR}/docs/*.md)
file(GLOB_RECURSE code
  ${SOURCE_DIR}/src/*.[ch] ${SOURCE_DIR}/include/*.h ${SOURCE_DIR}/tests/*.[ch]
  ${SOURCE_DIR}/kv/*.[ch] ${SOURCE_DIR}/kv/*.sh ${SOURCE_DIR}/lab/*.[ch]
  ${SOURCE_DIR}/lab/*.js ${SOURCE_DIR}/bench/*.[ch] ${SOURCE_DIR}/bench/*.sh
  ${SOURCE_DIR}/examples/*.[ch] ${SOURCE_DIR}/fuzz/*.[ch]
  ${SOURCE_DIR}/*/CMakeLists.txt ${SOURCE_DIR}/CMakeLists.txt
  ${SOURCE_DIR}/Makefile ${SOURCE_DIR}/.ci/run)
set(files ${SOURCE_DIR}/README.md ${SOURCE_DIR}/NEWS.md ${docs} ${code})
set(hits "")
foreach(f ${files})
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
  file(READ ${f} text)
  # Most files have no hit: one look at the whole text first (the line
  # walk below is slow in CMake).
  set(any FALSE)
  foreach(p IN LISTS patterns)
    string(REGEX REPLACE "^\\(\\^\\|" "(" whole "${p}")
    string(REGEX REPLACE "\\|\\$\\)$" ")" whole "${whole}")
    if(text MATCHES "${whole}")
      set(any TRUE)
      break()
    endif()
  endforeach()
  if(NOT any)
    continue()
  endif()
  # One list item per line: no ";" or bracket of the text may split or
  # join them.
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    foreach(p IN LISTS patterns)
      if(line MATCHES "${p}")
        string(SUBSTRING "${line}" 0 100 shown)
        list(APPEND hits "${rel}:${n}: ${shown}")
        break()
      endif()
    endforeach()
  endforeach()
endforeach()
if(hits)
  list(LENGTH hits n_hits)
  string(REPLACE ";" "\n  " hits "${hits}")
  message(FATAL_ERROR "${n_hits} lines use an undefined term (say the polling pump, the zero-delay timer, the per-record yield, or plain words):\n  ${hits}")
endif()
list(LENGTH files n_files)
message(STATUS "${n_files} files: no undefined term")
