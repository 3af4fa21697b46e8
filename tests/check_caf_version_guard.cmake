# The configure-time guard (cmake/caf_version.cmake) against a CAF it must
# refuse and the one it must accept. Run as
#   cmake -DSOURCE_DIR=<repo> -DCAF_INCLUDE_DIR=<dir of caf/> -DWORK_DIR=<scratch> -P ...
# Inside, with -DCHECK_DIR=<dir>, it is the child that runs the guard once.
cmake_minimum_required(VERSION 3.22)
if(CHECK_DIR)
  set(PROJECT_SOURCE_DIR "${SOURCE_DIR}")
  include("${SOURCE_DIR}/cmake/caf_version.cmake")
  actorflow_check_caf_version("${CHECK_DIR}")
  return()
endif()

function(run_guard dir out_result out_text)
  execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${SOURCE_DIR} -DCHECK_DIR=${dir}
                          -P ${CMAKE_CURRENT_LIST_FILE}
                  RESULT_VARIABLE result OUTPUT_VARIABLE text ERROR_VARIABLE text)
  string(REGEX REPLACE "[ \n]+" " " text "${text}")  # CMake wraps its messages
  set(${out_result} ${result} PARENT_SCOPE)
  set(${out_text} "${text}" PARENT_SCOPE)
endfunction()

# A CAF 0.18 stand-in: refused, naming the version found and the one expected.
file(WRITE "${WORK_DIR}/caf-0.18/caf/config.hpp" "#define CAF_VERSION 1800\n")
run_guard("${WORK_DIR}/caf-0.18" result text)
if(result EQUAL 0)
  message(FATAL_ERROR "the guard accepted CAF 0.18: ${text}")
endif()
foreach(expected "CAF 0.18.0 found" "written for CAF 0.17.x")
  string(FIND "${text}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the guard's refusal lacks '${expected}': ${text}")
  endif()
endforeach()

# The CAF this build uses: accepted.
run_guard("${CAF_INCLUDE_DIR}" result text)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the guard refused this build's CAF: ${text}")
endif()
message("caf version guard: refuses CAF 0.18.0, accepts ${CAF_INCLUDE_DIR}'s")
