# The sources, room by room (DESIGN.md, "Rooms"). Each room's CMakeLists.txt
# lists its files: the library's rooms into actorflow_objects with
# target_sources (CUDA-only ones with actorflow_cuda_sources), apps/lib and
# perf/ in their targets. Listed rather than globbed, so that a room's make-up
# reads in one place and a stray file does not build by accident; in exchange a
# file that no list names would silently not build, which test_sources_listed
# (tests/check_sources_listed.cmake) and a configure-time warning catch.
#
# Included by the top CMakeLists.txt, and by the test's script in -P mode
# (which uses only actorflow_source_rooms and actorflow_unlisted_sources).

# The folders whose .cpp, .cu and .capnp files must all be listed. apps/*.cpp
# and tests/ glob (each file there is a program or a suite), so they cannot
# forget one; tests/support's sources build into actorflow-bench's list (and
# into the suites that use them).
set(actorflow_source_rooms core schema devices ops actors apps/lib perf tests/support)

# Adds the calling room's CUDA-only sources (paths relative to its folder) to
# actorflow_objects when the CUDA build is on (ACTORFLOW_HAS_CUDA), and records
# them either way, so that a build without CUDA still counts them as listed.
function(actorflow_cuda_sources)
  set(files "")
  foreach(file IN LISTS ARGN)
    get_filename_component(file "${file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND files "${file}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY ACTORFLOW_CUDA_SOURCES ${files})
  if(ACTORFLOW_HAS_CUDA)
    target_sources(actorflow_objects PRIVATE ${files})
  endif()
endfunction()

# The source files under the rooms of `source_dir` (repository-relative paths)
# that `listed` (the same form) does not name, into `out`.
function(actorflow_unlisted_sources source_dir listed out)
  set(globs "")
  foreach(room IN LISTS actorflow_source_rooms)
    list(APPEND globs "${source_dir}/${room}/*.cpp" "${source_dir}/${room}/*.cu"
         "${source_dir}/${room}/*.capnp")
  endforeach()
  file(GLOB_RECURSE on_disk RELATIVE "${source_dir}" ${globs})
  if(listed)
    list(REMOVE_ITEM on_disk ${listed})
  endif()
  list(SORT on_disk)
  set(${out} "${on_disk}" PARENT_SCOPE)
endfunction()

# Writes every source the targets' lists name (and the CUDA-only and schema
# lists, built or not) to `file`, repository-relative, one per line, for
# test_sources_listed; warns now about any file of a room left out.
function(actorflow_record_listed_sources file)
  set(listed "")
  foreach(target IN ITEMS actorflow_objects actorflow_apps actorflow_serve_fronts actorflow-bench
                         cluster-sim actorflow-scaling-task)
    get_target_property(dir ${target} SOURCE_DIR)
    get_target_property(sources ${target} SOURCES)
    foreach(source IN LISTS sources)
      get_filename_component(source "${source}" ABSOLUTE BASE_DIR "${dir}")
      list(APPEND listed "${source}")
    endforeach()
  endforeach()
  get_property(cuda GLOBAL PROPERTY ACTORFLOW_CUDA_SOURCES)
  list(APPEND listed ${cuda} ${ACTORFLOW_SCHEMAS})
  set(relative "")
  foreach(source IN LISTS listed)
    string(FIND "${source}" "${PROJECT_BINARY_DIR}/" in_build)
    file(RELATIVE_PATH source "${PROJECT_SOURCE_DIR}" "${source}")
    # Generated files (the schemas' C++) live in the build tree.
    if(NOT in_build EQUAL 0 AND NOT source MATCHES "^\\.\\./")
      list(APPEND relative "${source}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES relative)
  list(SORT relative)
  string(REPLACE ";" "\n" text "${relative}")
  file(WRITE "${file}" "${text}\n")
  actorflow_unlisted_sources("${PROJECT_SOURCE_DIR}" "${relative}" unlisted)
  if(unlisted)
    string(REPLACE ";" "\n  " unlisted "${unlisted}")
    message(WARNING "Sources in no room's list (they will not build; add each to its room's "
                    "CMakeLists.txt):\n  ${unlisted}")
  endif()
endfunction()
