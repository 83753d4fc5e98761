# The install test: what a user gets from `cmake --install`, checked the way
# a user would use it. Run by CTest as `cmake -DSTEP=<step> ... -P check.cmake`
# (tests/CMakeLists.txt), one step per CTest entry:
#
#   install       installs this build tree into WORK/prefix (a fresh prefix,
#                 never the configured CMAKE_INSTALL_PREFIX): the fixture
#   pkg_config    builds tests/install/consumer.c with `pkg-config --cflags
#                 --libs lull` and runs it; then runs the pkg-config build
#                 line written in the header comment of every examples/*.c
#   find_package  configures tests/install/ as a user's CMake project with
#                 CMAKE_PREFIX_PATH=WORK/prefix, builds against lull::lull
#                 and lull::lull_static, runs both
#   kv            builds kv/ (lull-kv) as its own project against the
#                 prefix and runs its --help
#   examples      configures examples/ as its own project against the
#                 prefix, builds it and runs its CTest cases (each example
#                 with a timeout, its exit status and its expected output)
#
# Inputs: STEP, BUILD_DIR (the lull build tree), SOURCE_DIR (lull's
# sources), WORK (scratch directory), LIBDIR (CMAKE_INSTALL_LIBDIR), DOCDIR
# (CMAKE_INSTALL_DOCDIR), CC, CTEST.
cmake_minimum_required(VERSION 3.20)

set(prefix ${WORK}/prefix)
# Every child step is bounded (below CTest's timeout), so that a hang fails
# with the name of what hung.
set(step_timeout 25)

function(run what)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
    TIMEOUT ${step_timeout})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

if(NOT EXISTS ${prefix}/include/lull.h AND NOT STEP STREQUAL "install")
  message(FATAL_ERROR "nothing installed in ${prefix}: run the install step")
endif()

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK})
  run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
  foreach(f include/lull.h ${LIBDIR}/pkgconfig/lull.pc
            ${LIBDIR}/cmake/lull/lullConfig.cmake ${DOCDIR}/README.md
            ${DOCDIR}/docs/API.md ${DOCDIR}/docs/KV.md)
    if(NOT EXISTS ${prefix}/${f})
      message(FATAL_ERROR "not installed: ${prefix}/${f}")
    endif()
  endforeach()
  # The programs, where this build made them: each answers --help from
  # the prefix, and lull-lab finds what it runs there (lab/paths.c).
  if(EXISTS ${BUILD_DIR}/kv/lull-kv)
    run("installed lull-kv --help" ${prefix}/bin/lull-kv --help)
    if(NOT run_output MATCHES "--replica-of")
      message(FATAL_ERROR "lull-kv --help lists no options:\n${run_output}")
    endif()
  endif()
  if(EXISTS ${BUILD_DIR}/lab/lull-lab)
    run("installed lull-lab --help" ${prefix}/bin/lull-lab --help)
    foreach(f libexec/lull/lull-lab-so libexec/lull/lull-floor-epoll
              share/lull/lab/node/turns.js)
      if(NOT EXISTS ${prefix}/${f})
        message(FATAL_ERROR "not installed: ${prefix}/${f}")
      endif()
    endforeach()
  endif()
  message(STATUS "installed into ${prefix}")

elseif(STEP STREQUAL "pkg_config")
  find_program(PKG_CONFIG NAMES pkg-config pkgconf)
  if(NOT PKG_CONFIG)
    message(STATUS "pkg-config not found: step skipped")
    return()
  endif()
  # Only this prefix: a lull installed elsewhere on the machine must not
  # make the test pass.
  set(ENV{PKG_CONFIG_LIBDIR} ${prefix}/${LIBDIR}/pkgconfig)
  unset(ENV{PKG_CONFIG_PATH})
  run("pkg-config" ${PKG_CONFIG} --cflags --libs lull)
  string(STRIP "${run_output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run("pkg-config libdir" ${PKG_CONFIG} --variable=libdir lull)
  string(STRIP "${run_output}" libdir)
  set(dir ${WORK}/pkg-config)
  file(MAKE_DIRECTORY ${dir})
  run("cc with pkg-config flags" ${CC} -o ${dir}/consumer
    ${SOURCE_DIR}/tests/install/consumer.c ${flags} -Wl,-rpath,${libdir})
  run("consumer (pkg-config)" ${dir}/consumer)
  if(NOT run_output MATCHES "consumer: ok")
    message(FATAL_ERROR "consumer (pkg-config) printed: ${run_output}")
  endif()

  # Every example documents its own build line; run each as written (with
  # warnings as errors), from a copy of examples/.
  file(COPY ${SOURCE_DIR}/examples/ DESTINATION ${dir}/examples)
  file(GLOB sources ${SOURCE_DIR}/examples/*.c)
  foreach(src ${sources})
    get_filename_component(name ${src} NAME)
    file(STRINGS ${src} lines REGEX "^ \\*   cc .*pkg-config --cflags --libs lull")
    list(LENGTH lines n)
    if(NOT n EQUAL 1)
      message(FATAL_ERROR "${name}: no single `cc ... $(pkg-config --cflags --libs lull)` build line in its header comment")
    endif()
    # An example that builds on another library too (embed_libuv: libuv)
    # is skipped, with a line, where that library is not installed.
    string(REGEX MATCH "--libs lull ([a-z0-9_ -]+)\\)" other "${lines}")
    if(other)
      string(STRIP "${CMAKE_MATCH_1}" other)
      separate_arguments(other UNIX_COMMAND "${other}")
      execute_process(COMMAND ${PKG_CONFIG} --exists ${other} RESULT_VARIABLE has)
      if(NOT has EQUAL 0)
        message(STATUS "${name}: skipped, needs ${other}")
        continue()
      endif()
    endif()
    string(REGEX REPLACE "^ \\*   cc " "${CC} -Wall -Wextra -Werror " line "${lines}")
    execute_process(COMMAND sh -c "${line}"
      WORKING_DIRECTORY ${dir}/examples
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
      TIMEOUT ${step_timeout})
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${name}: its build line failed:\n${line}\n${out}\n${err}")
    endif()
    message(STATUS "${name}: built with its pkg-config line")
  endforeach()

elseif(STEP STREQUAL "find_package")
  set(dir ${WORK}/find-package)
  file(REMOVE_RECURSE ${dir})
  run("configure a find_package(lull) project" ${CMAKE_COMMAND}
    -S ${SOURCE_DIR}/tests/install -B ${dir}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
  run("build it" ${CMAKE_COMMAND} --build ${dir})
  file(STRINGS ${dir}/CMakeCache.txt found REGEX "^lull_DIR:")
  if(NOT found MATCHES "${prefix}/")
    message(FATAL_ERROR "find_package(lull) found another lull: ${found}")
  endif()
  foreach(bin consumer_shared consumer_static)
    run("${bin}" ${dir}/${bin})
    if(NOT run_output MATCHES "consumer: ok")
      message(FATAL_ERROR "${bin} printed: ${run_output}")
    endif()
  endforeach()

elseif(STEP STREQUAL "examples")
  set(dir ${WORK}/examples)
  file(REMOVE_RECURSE ${dir})
  run("configure examples/ against the prefix" ${CMAKE_COMMAND}
    -S ${SOURCE_DIR}/examples -B ${dir}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DCMAKE_C_FLAGS=-Werror")
  run("build examples/" ${CMAKE_COMMAND} --build ${dir} --parallel 2)
  # Their checks of hostile runs wait on purpose (a silent server's 5 s,
  # a supervisor's workers dying): two at a time, within 60 s, not 25.
  set(step_timeout 60)
  run("the examples' own tests" ${CTEST} --test-dir ${dir}
    --output-on-failure --no-tests=error --parallel 2)
  message(STATUS "${run_output}")

elseif(STEP STREQUAL "kv")
  # lull-kv built from its own directory against the prefix, as someone
  # changing it against an installed lull would, and its --help run.
  set(dir ${WORK}/kv)
  file(REMOVE_RECURSE ${dir})
  run("configure kv/ against the prefix" ${CMAKE_COMMAND}
    -S ${SOURCE_DIR}/kv -B ${dir}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DCMAKE_C_FLAGS=-Werror")
  run("build kv/" ${CMAKE_COMMAND} --build ${dir} --parallel 2)
  set(ENV{LD_LIBRARY_PATH} ${prefix}/${LIBDIR})
  run("kv/'s lull-kv --help" ${dir}/lull-kv --help)
  if(NOT run_output MATCHES "--replica-of")
    message(FATAL_ERROR "lull-kv built from kv/ answers --help with: ${run_output}")
  endif()

else()
  message(FATAL_ERROR "unknown STEP '${STEP}'")
endif()
