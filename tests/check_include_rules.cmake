# Checks every quoted #include against the rooms' order (DESIGN.md, "Rooms"):
# core <- devices <- ops <- actors <- apps/perf/tests, with ops/geometry a room
# of its own that only core may feed, and tests/support (process helpers) one
# that the tests and perf share. Run as
#   cmake -DSOURCE_DIR=<repo> -P tests/check_include_rules.cmake
# Prints "file:line: <room> may not include <path>" per violation and fails if
# there is any. Angle includes (system and third-party headers) are not checked.
cmake_minimum_required(VERSION 3.22)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "pass the repository root as -DSOURCE_DIR=...")
endif()
get_filename_component(SOURCE_DIR "${SOURCE_DIR}" ABSOLUTE)

set(all_rooms core devices ops actors schema apps perf tests/support tests)
# Rooms a file may include from, by the file's room; the most specific room
# wins (ops/geometry before ops). tests/ may include anything.
set(allowed_core core)
set(allowed_devices core devices)
set(allowed_ops/geometry core ops/geometry)
set(allowed_ops core devices ops)
# actors/ reads and writes the schema formats (graph_io, checkpoint_io) and
# the headers Cap'n Proto generates from them.
set(allowed_actors core devices ops actors schema)
set(allowed_schema core schema)
set(allowed_apps core devices ops actors schema apps perf)
# tests/support: the child processes and test certificates that the cluster
# tests and the cluster benchmarks share.
set(allowed_tests/support core devices ops actors schema tests/support)
set(allowed_perf core devices ops actors schema apps perf tests/support)
set(checked_rooms ops/geometry core devices ops actors schema apps perf tests/support)

# The room of a repository-relative path, or "" when it is in none.
function(room_of path out)
  foreach(room IN LISTS checked_rooms all_rooms)
    if(path MATCHES "^${room}/")
      set(${out} "${room}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

set(violations 0)
foreach(room IN LISTS checked_rooms)
  file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/${room}/*.h"
       "${SOURCE_DIR}/${room}/*.hpp" "${SOURCE_DIR}/${room}/*.cpp" "${SOURCE_DIR}/${room}/*.cu"
       "${SOURCE_DIR}/${room}/*.cuh")
  foreach(file IN LISTS files)
    room_of("${file}" file_room)
    if(NOT file_room STREQUAL room)
      continue()  # ops/geometry's files are checked once, as ops/geometry
    endif()
    file(READ "${SOURCE_DIR}/${file}" text)
    # A leading newline lets every directive match at the start of a line.
    set(rest "\n${text}")
    set(line 0)
    string(REGEX MATCHALL "\n[ \t]*#[ \t]*include[ \t]*\"[^\"\n]*\"" directives "${rest}")
    foreach(directive IN LISTS directives)
      # Its line: the newlines since the last directive, plus its own leading one.
      string(FIND "${rest}" "${directive}" at)
      string(SUBSTRING "${rest}" 0 ${at} before)
      string(REGEX MATCHALL "\n" newlines "${before}")
      list(LENGTH newlines n)
      math(EXPR line "${line} + ${n} + 1")
      string(LENGTH "${directive}" len)
      math(EXPR after "${at} + ${len}")
      string(SUBSTRING "${rest}" ${after} -1 rest)
      string(REGEX REPLACE ".*\"([^\"]*)\"$" "\\1" path "${directive}")
      # A path not naming a room is relative to the including file: resolve it.
      room_of("${path}" target_room)
      if(target_room STREQUAL "")
        get_filename_component(dir "${file}" DIRECTORY)
        get_filename_component(full "${SOURCE_DIR}/${dir}/${path}" ABSOLUTE)
        if(NOT EXISTS "${full}")
          continue()
        endif()
        file(RELATIVE_PATH path "${SOURCE_DIR}" "${full}")
        room_of("${path}" target_room)
        if(target_room STREQUAL "")
          continue()
        endif()
      endif()
      # ops/geometry is part of ops for the rooms that may include ops.
      set(target_rooms "${target_room}")
      if(target_room STREQUAL "ops/geometry")
        list(APPEND target_rooms ops)
      endif()
      set(ok FALSE)
      foreach(t IN LISTS target_rooms)
        if(t IN_LIST allowed_${room})
          set(ok TRUE)
        endif()
      endforeach()
      if(NOT ok)
        message("${file}:${line}: ${room}/ may not include ${path}")
        math(EXPR violations "${violations} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "${violations} include(s) break the rooms' order (DESIGN.md, \"Rooms\")")
endif()
message("include rules: every quoted include follows the rooms' order")
