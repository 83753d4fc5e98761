# Every lull name the user docs mention exists (cmake -P, run by ctest as
# docs.names): each lull_... and LULL_... identifier in README.md, NEWS.md
# and docs/*.md must be one that include/lull.h declares, so that a rename,
# a removal or a typo in a doc fails here and names the file. Allowed
# besides:
#   - a prefix ending in "_" (`lull_fs_*`, `lull_`) that some name of the
#     header starts with;
#   - lull__ names (lull's internals, named in design notes) that src/
#     defines, and LULL_ names that the build, src/ or tests/ define
#     (build options, environment variables, LULL_ASSERT);
#   - CMake's target names (lull::lull, lull::lull_static);
#   - the old names of docs/API.md's rename table ("Renamed in 1.0"), in
#     that table's rows and in NEWS.md only, and the names NEWS.md says
#     1.0 removed (list below), in NEWS.md only.
#   cmake -DSOURCE_DIR=<repo> -P tests/doc_names.cmake

# Public names 1.0 removed without a new name (NEWS.md says so).
set(removed_in_1_0 lull_frame_ops)

file(READ ${SOURCE_DIR}/include/lull.h header)
string(REGEX MATCHALL "lull_[a-z0-9_]+" header_ids "${header}")
string(REGEX MATCHALL "LULL_[A-Z0-9_]+" header_macros "${header}")
list(REMOVE_DUPLICATES header_ids)
list(REMOVE_DUPLICATES header_macros)

# Internal names, and the LULL_ names of the build and the tests.
file(GLOB internal_files ${SOURCE_DIR}/src/*.c ${SOURCE_DIR}/src/*.h
  ${SOURCE_DIR}/tests/*.c ${SOURCE_DIR}/tests/*.h
  ${SOURCE_DIR}/tests/CMakeLists.txt ${SOURCE_DIR}/CMakeLists.txt
  ${SOURCE_DIR}/cmake/* ${SOURCE_DIR}/Makefile)
set(internal_ids "")
set(internal_macros "")
foreach(f ${internal_files})
  file(READ ${f} text)
  string(REGEX MATCHALL "lull__[a-z0-9_]+" ids "${text}")
  string(REGEX MATCHALL "LULL_[A-Z0-9_]+" macros "${text}")
  list(APPEND internal_ids ${ids})
  list(APPEND internal_macros ${macros})
endforeach()
list(REMOVE_DUPLICATES internal_ids)
list(REMOVE_DUPLICATES internal_macros)

# The rename table: its rows, and its old column.
file(READ ${SOURCE_DIR}/docs/API.md api)
string(FIND "${api}" "\n## Renamed in 1.0\n" table_start)
if(table_start LESS 0)
  message(FATAL_ERROR "docs/API.md has no \"## Renamed in 1.0\" section")
endif()
math(EXPR table_start "${table_start} + 1")
string(SUBSTRING "${api}" ${table_start} -1 table)
string(FIND "${table}" "\n## " table_end)
string(SUBSTRING "${table}" 0 ${table_end} table)
string(REGEX MATCHALL "\n\\| `lull_[a-z0-9_]+` \\| `lull_[a-z0-9_]+` \\|" rows "\n${table}")
set(old_names "")
foreach(row ${rows})
  string(REGEX REPLACE "^\n\\| `(lull_[a-z0-9_]+)` .*" "\\1" old "${row}")
  list(APPEND old_names ${old})
endforeach()
list(LENGTH old_names n_old)
if(n_old EQUAL 0)
  message(FATAL_ERROR "docs/API.md's rename table has no rows")
endif()

file(GLOB docs ${SOURCE_DIR}/docs/*.md)
set(files ${SOURCE_DIR}/README.md ${SOURCE_DIR}/NEWS.md ${docs})
set(bad "")
set(checked 0)
foreach(f ${files})
  file(READ ${f} text)
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
  set(allowed "")
  if(rel STREQUAL "NEWS.md")
    set(allowed ${old_names} ${removed_in_1_0})
  elseif(rel STREQUAL "docs/API.md")
    # The table's rows name the old names on purpose; the rest of the page
    # may not.
    foreach(row ${rows})
      string(REPLACE "${row}" "\n" text "${text}")
    endforeach()
  endif()
  string(REGEX REPLACE "lull::[a-z_]+" "" text "${text}")
  # A name starts after a character that cannot be part of it.
  string(REGEX MATCHALL "[^A-Za-z0-9_](lull_[a-z0-9_]*|LULL_[A-Z0-9_]*)" tokens " ${text}")
  foreach(token ${tokens})
    string(SUBSTRING "${token}" 1 -1 name)
    math(EXPR checked "${checked} + 1")
    if(name MATCHES "^lull__")
      list(FIND internal_ids ${name} i)
      list(FIND header_ids ${name} h)
      if(i GREATER -1 OR h GREATER -1)
        continue()
      endif()
    elseif(name MATCHES "^lull_")
      list(FIND header_ids ${name} h)
      list(FIND allowed ${name} a)
      if(h GREATER -1 OR a GREATER -1)
        continue()
      endif()
    else()
      list(FIND header_macros ${name} h)
      list(FIND internal_macros ${name} i)
      if(h GREATER -1 OR i GREATER -1)
        continue()
      endif()
    endif()
    if(name MATCHES "_$") # a prefix: some declared name must start with it
      set(found FALSE)
      foreach(id ${header_ids} ${header_macros})
        string(FIND "${id}" "${name}" at)
        if(at EQUAL 0)
          set(found TRUE)
          break()
        endif()
      endforeach()
      if(found)
        continue()
      endif()
    endif()
    list(APPEND bad "${rel}: ${name}")
  endforeach()
endforeach()
if(bad)
  list(REMOVE_DUPLICATES bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "names in the docs that include/lull.h does not declare:\n  ${bad}")
endif()
list(LENGTH files n_files)
message(STATUS "${n_files} docs: all ${checked} lull names exist (${n_old} old names, in the rename table and NEWS.md only)")
