# Checks every quoted #include against the rooms' order (ARCHITECTURE.md):
# core <- devices <- ops <- actors <- apps/perf/tests, with ops/geometry a room
# of its own that only core may feed, actors/ split into sub-rooms in an order
# of their own, and tests/support (process helpers) one that the tests and
# perf share. Run as
#   cmake -DSOURCE_DIR=<repo> -P tests/check_include_rules.cmake
# Prints "file:line: <room> may not include <path>" per violation, and the
# files of any circle of includes, and fails if there is any. Angle includes
# (system and third-party headers) are not checked.
cmake_minimum_required(VERSION 3.22)
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "pass the repository root as -DSOURCE_DIR=...")
endif()
get_filename_component(SOURCE_DIR "${SOURCE_DIR}" ABSOLUTE)

# Every room, lowest first: a room may include only itself and rooms before
# it (checked below, so the table cannot hold a circle). The most specific
# room of a path wins (ops/geometry before ops, actors/run before actors).
# actors/ itself holds the session and checkpoints; actors/actorflow.hpp, the
# umbrella header, is a room of one that sees every sub-room.
set(room_order
    core schema devices ops/geometry ops
    actors/caf_ext actors/trace actors/compile actors/run actors/resources actors/cluster
    actors actors/input actors/serving actors/actorflow.hpp
    tests/support apps perf tests)
set(actors_rooms actors/caf_ext actors/trace actors/compile actors/run actors/resources
                 actors/cluster actors actors/input actors/serving)

# Rooms a file may include from, by the file's room.
set(allowed_core core)
set(allowed_schema core schema)
set(allowed_devices core devices)
set(allowed_ops/geometry core ops/geometry)
set(allowed_ops core devices ops)
set(below_actors core schema devices ops)
# CAF's internals: the scheduler, the multiplexer, TLS, connection guards.
set(allowed_actors/caf_ext ${below_actors} actors/caf_ext)
# Timelines, profiles and summaries: fed by the step engine, needing none of it.
set(allowed_actors/trace ${below_actors} actors/trace)
# Graph passes: pure functions of a graph, a signature and a device list.
set(allowed_actors/compile ${below_actors} actors/compile)
# The step engine: node actors, executables, the runtime.
set(allowed_actors/run ${below_actors} actors/caf_ext actors/trace actors/compile actors/run)
# Variables, queues and accumulators: actors that steps send requests to.
set(allowed_actors/resources ${below_actors} actors/caf_ext actors/trace actors/compile actors/run
    actors/resources)
set(allowed_actors/cluster ${below_actors} actors/caf_ext actors/trace actors/compile actors/run
    actors/resources actors/cluster)
set(allowed_actors ${below_actors} actors/caf_ext actors/trace actors/compile actors/run
    actors/resources actors/cluster actors)
# Readers feed a session's queues.
set(allowed_actors/input ${below_actors} actors/caf_ext actors/trace actors/compile actors/run
    actors/resources actors/cluster actors actors/input)
# Exported models and what serves them: sessions on loaded graphs.
set(allowed_actors/serving ${below_actors} actors/caf_ext actors/trace actors/compile actors/run
    actors/resources actors/cluster actors actors/serving)
set(allowed_actors/actorflow.hpp ${below_actors} ${actors_rooms})
set(allowed_tests/support ${below_actors} ${actors_rooms} tests/support)
set(allowed_apps ${below_actors} ${actors_rooms} apps)
set(allowed_perf ${below_actors} ${actors_rooms} apps perf tests/support)
set(checked_rooms ${room_order})
list(REMOVE_ITEM checked_rooms tests)  # tests/ may include anything

set(violations 0)

# The table itself: a room that may include a later one would allow a circle.
set(position 0)
foreach(room IN LISTS checked_rooms)
  foreach(target IN LISTS allowed_${room})
    list(FIND room_order "${target}" at)
    if(at GREATER position)
      message("rooms: ${room} may include the later room ${target}")
      math(EXPR violations "${violations} + 1")
    endif()
  endforeach()
  math(EXPR position "${position} + 1")
endforeach()

# The room of a repository-relative path, or "" when it is in none: the
# longest room name that is the path or a folder above it.
function(room_of path out)
  set(best "")
  foreach(room IN LISTS room_order)
    string(LENGTH "${room}" len)
    string(LENGTH "${best}" best_len)
    if((path STREQUAL room OR path MATCHES "^${room}/") AND len GREATER best_len)
      set(best "${room}")
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

# Every file's quoted includes, resolved to repository paths: checked against
# the rooms, and kept as the edges of the circle check below.
set(all_files "")
foreach(room IN LISTS checked_rooms)
  file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/${room}/*.h"
       "${SOURCE_DIR}/${room}/*.hpp" "${SOURCE_DIR}/${room}/*.cpp" "${SOURCE_DIR}/${room}/*.cu"
       "${SOURCE_DIR}/${room}/*.cuh")
  if(EXISTS "${SOURCE_DIR}/${room}" AND NOT IS_DIRECTORY "${SOURCE_DIR}/${room}")
    set(files "${room}")
  endif()
  foreach(file IN LISTS files)
    room_of("${file}" file_room)
    if(NOT file_room STREQUAL room OR file IN_LIST all_files)
      continue()  # a sub-room's files are checked once, as the sub-room
    endif()
    list(APPEND all_files "${file}")
    string(MAKE_C_IDENTIFIER "${file}" key)
    set(edges_${key} "")
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
      # A path not naming a file of the tree is relative to the including file.
      if(NOT EXISTS "${SOURCE_DIR}/${path}")
        get_filename_component(dir "${file}" DIRECTORY)
        get_filename_component(full "${SOURCE_DIR}/${dir}/${path}" ABSOLUTE)
        if(NOT EXISTS "${full}")
          continue()  # generated (schema/*.capnp.h, core/version.hpp)
        endif()
        file(RELATIVE_PATH path "${SOURCE_DIR}" "${full}")
      endif()
      room_of("${path}" target_room)
      if(target_room STREQUAL "")
        continue()
      endif()
      list(APPEND edges_${key} "${path}")
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

# Circles of includes between files (inside a room too): take away, again and
# again, the files whose includes are all taken away; what stays is a circle.
set(remaining ${all_files})
set(progress TRUE)
while(progress)
  set(progress FALSE)
  set(next "")
  foreach(file IN LISTS remaining)
    string(MAKE_C_IDENTIFIER "${file}" key)
    set(blocked FALSE)
    foreach(dep IN LISTS edges_${key})
      if(dep IN_LIST remaining AND NOT dep STREQUAL file)
        set(blocked TRUE)
        break()
      endif()
    endforeach()
    if(blocked)
      list(APPEND next "${file}")
    else()
      set(progress TRUE)
    endif()
  endforeach()
  set(remaining ${next})
endwhile()
if(remaining)
  list(JOIN remaining ", " in_circle)
  message("include circle among: ${in_circle}")
  math(EXPR violations "${violations} + 1")
endif()

if(violations GREATER 0)
  message(FATAL_ERROR "${violations} include(s) break the rooms' order (ARCHITECTURE.md)")
endif()
message("include rules: every quoted include follows the rooms' order, and none makes a circle")
