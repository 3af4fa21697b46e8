# Installs the public headers (run by `cmake --install`, see cmake/install.cmake):
# the umbrella actors/actorflow.hpp and every header it reaches through quoted
# includes, from the source tree or the generated one, each under
# <prefix>/include/actorflow/<room>/..., with its quoted includes rewritten
# to <actorflow/...>, so that an application includes only <actorflow/...>
# names. Headers the umbrella does not reach (the runtime's messages, node
# plans, CUDA internals) are not installed. The umbrella itself goes to
# <actorflow/actorflow.hpp>, and a few forwarding headers give the common
# entry points short names (<actorflow/session.hpp>, ...).
# Expects AF_SOURCE_DIR, AF_GENERATED_DIR and AF_INCLUDE_DIR (the destination).
cmake_policy(PUSH)
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST), also when run with -P

function(af_find_header name out)
  foreach(root IN ITEMS "${AF_SOURCE_DIR}" "${AF_GENERATED_DIR}")
    if(EXISTS "${root}/${name}")
      set(${out} "${root}/${name}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "public header ${name} (included by an installed header) not found")
endfunction()

set(pending "actors/actorflow.hpp")
set(installed "")
while(pending)
  list(POP_FRONT pending name)
  if(name IN_LIST installed)
    continue()
  endif()
  list(APPEND installed "${name}")
  af_find_header("${name}" path)
  file(READ "${path}" text)
  string(REGEX MATCHALL "#include \"[^\"]+\"" includes "${text}")
  foreach(inc IN LISTS includes)
    string(REGEX REPLACE "#include \"([^\"]+)\"" "\\1" dep "${inc}")
    list(APPEND pending "${dep}")
  endforeach()
  string(REGEX REPLACE "#include \"([^\"]+)\"" "#include <actorflow/\\1>" text "${text}")
  set(dest "${AF_INCLUDE_DIR}/actorflow/${name}")
  if(name STREQUAL "actors/actorflow.hpp")
    set(dest "${AF_INCLUDE_DIR}/actorflow/actorflow.hpp")
  endif()
  file(WRITE "${dest}" "${text}")
endwhile()

foreach(entry IN ITEMS "session:actors/session.hpp" "graph:core/graph.hpp"
                       "tensor:core/tensor.hpp" "cluster:actors/cluster/cluster.hpp"
                       "checkpoint:actors/checkpoint.hpp" "error:core/error.hpp")
  string(REPLACE ":" ";" pair "${entry}")
  list(GET pair 0 short)
  list(GET pair 1 full)
  file(WRITE "${AF_INCLUDE_DIR}/actorflow/${short}.hpp"
       "// <actorflow/${full}> under a short name.\n#pragma once\n#include <actorflow/${full}>\n")
endforeach()
list(LENGTH installed count)
message(STATUS "Installed ${count} public headers under ${AF_INCLUDE_DIR}/actorflow")
cmake_policy(POP)
