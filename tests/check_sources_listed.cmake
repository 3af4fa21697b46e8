# Fails when a source file under a room (cmake/rooms.cmake's
# actorflow_source_rooms: .cpp, .cu, .capnp) is in no room's list, naming the
# file: listed sources are not globbed, so a forgotten file would otherwise
# silently not build. Run as
#   cmake -DSOURCE_DIR=<repo> -DLISTED=<build>/actorflow_listed_sources.txt
#         -P tests/check_sources_listed.cmake
# LISTED is what the last configure found in the lists; the rooms are globbed
# now, so a file added since then is caught too.
cmake_minimum_required(VERSION 3.22)
if(NOT SOURCE_DIR OR NOT LISTED)
  message(FATAL_ERROR "pass -DSOURCE_DIR=<repository> -DLISTED=<listed sources file>")
endif()
include("${SOURCE_DIR}/cmake/rooms.cmake")
file(STRINGS "${LISTED}" listed)
actorflow_unlisted_sources("${SOURCE_DIR}" "${listed}" unlisted)
list(LENGTH listed count)
if(unlisted)
  foreach(file IN LISTS unlisted)
    message("${file}: in no room's list; add it to its room's CMakeLists.txt (and re-run cmake)")
  endforeach()
  message(FATAL_ERROR "sources left out of the build")
endif()
message(STATUS "every source of ${actorflow_source_rooms} is listed (${count} files)")
