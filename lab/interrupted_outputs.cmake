# lab.interrupted_outputs: lull-lab ended by SIGTERM or SIGHUP mid-run
# leaves the files --json and --plot name as they were. The JSON file was
# opened (truncated) at start and written as the run went, so an
# interrupted run left half a JSON document in its place, and the last
# whole run's figures were gone; the check that --plot is writable created
# an empty SVG, left behind too. A run that ends writes both whole, and
# --json /dev/stdout (not a file to replace) still writes to stdout.
#
#   cmake -DLAB=path/to/lull-lab -DOUT=scratch/dir -P interrupted_outputs.cmake
cmake_minimum_required(VERSION 3.19)
if(NOT LAB OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DLAB=lull-lab -DOUT=dir -P interrupted_outputs.cmake")
endif()
set(failures "")
foreach(sig TERM HUP)
  set(dir "${OUT}/${sig}")
  file(REMOVE_RECURSE "${dir}")
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${dir}/lab.json" "{\"a run before\": 1}\n")
  # Signalled once the first scenario's title is out (the JSON file has
  # been written to by then); prints the exit status and the directory.
  execute_process(COMMAND sh -c "
    cd '${dir}' || exit 1
    \"$0\" turns --quick --json lab.json --plot lab.svg >out 2>err &
    pid=$!; i=0
    while [ $i -lt 600 ] && ! grep -q '^turns:' out 2>/dev/null; do
      sleep 0.05; i=$((i + 1)); done
    kill -${sig} $pid; wait $pid; echo \"exit $?\"; rm -f out err; ls -A" "${LAB}"
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  file(READ "${dir}/lab.json" json)
  if(NOT out MATCHES "^exit (129|143)\nlab.json\n$" OR
     NOT json STREQUAL "{\"a run before\": 1}\n")
    set(failures "${failures}\n  SIG${sig}: want exit 128+signal, lab.json as it was and nothing else; got:\n${out}lab.json: ${json}")
  endif()
  file(REMOVE_RECURSE "${dir}")
endforeach()

# A whole run: both files written, nothing else left beside them.
set(dir "${OUT}/whole")
file(REMOVE_RECURSE "${dir}")
file(MAKE_DIRECTORY "${dir}")
execute_process(COMMAND ${LAB} turns --quick --only virtual_clock
    --json ${dir}/lab.json --plot ${dir}/lab.svg
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
file(GLOB left RELATIVE ${dir} ${dir}/*)
file(READ "${dir}/lab.json" json)
if(NOT rc EQUAL 0 OR NOT left STREQUAL "lab.json;lab.svg" OR
   NOT json MATCHES "\"checks_failed\": 0\n}\n$")
  set(failures "${failures}\n  a whole run: exit ${rc}, left '${left}', lab.json:\n${json}")
endif()
file(REMOVE_RECURSE "${dir}")
execute_process(COMMAND sh -c "\"$0\" turns --quick --only virtual_clock --json /dev/stdout" "${LAB}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\"checks_failed\": 0\n}\n")
  set(failures "${failures}\n  --json /dev/stdout: exit ${rc}, stdout:\n${out}${err}")
endif()

# A file lull-lab may write in a directory it may not: no temporary file
# can go beside it, so it is written in place. (As root, as nobody:
# root may write any directory.)
set(dir "${OUT}/ro")
file(REMOVE_RECURSE "${dir}")
file(MAKE_DIRECTORY "${dir}")
file(WRITE "${dir}/lab.json" "")
file(CHMOD "${dir}/lab.json" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ
  GROUP_WRITE WORLD_READ WORLD_WRITE)
file(CHMOD "${dir}" PERMISSIONS OWNER_READ OWNER_EXECUTE GROUP_READ
  GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(as "")
execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
find_program(SETPRIV setpriv)
if(uid STREQUAL "0" AND SETPRIV)
  set(as ${SETPRIV} --reuid=65534 --regid=65534 --clear-groups)
endif()
if(NOT uid STREQUAL "0" OR as)
  execute_process(COMMAND ${as} ${LAB} turns --quick --only virtual_clock
      --json ${dir}/lab.json
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  file(READ "${dir}/lab.json" json)
  if(NOT rc EQUAL 0 OR NOT json MATCHES "\"checks_failed\": 0\n}\n$")
    set(failures "${failures}\n  --json a writable file in a read-only directory: exit ${rc}, lab.json:\n${json}${out}${err}")
  endif()
endif()
file(CHMOD "${dir}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
file(REMOVE_RECURSE "${dir}")

if(failures)
  message(FATAL_ERROR "lull-lab's --json or --plot file after a run:${failures}")
endif()
message(STATUS "an interrupted run leaves --json and --plot as they were")
