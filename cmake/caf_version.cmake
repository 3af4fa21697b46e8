# Refuses a CAF other than the one actors/caf_ext was written for. Those
# extensions patch CAF 0.17's internals (scheduler policy and worker loop,
# multiplexer loop, mailbox elements, OpenSSL calls); on another CAF they may
# compile and misbehave, or fail deep in a template. The accepted range is
# read from actors/caf_ext/caf_version.hpp, whose static_assert guards the
# same range at compile time. Sets CAF_VERSION ("0.17.6") and
# CAF_VERSION_NUMBER (1706).
function(actorflow_check_caf_version include_dir)
  set(caf_config "${include_dir}/caf/config.hpp")
  file(STRINGS "${caf_config}" found_line REGEX "^#define CAF_VERSION [0-9]+")
  file(STRINGS "${PROJECT_SOURCE_DIR}/actors/caf_ext/caf_version.hpp" range_lines
       REGEX "^#define ACTORFLOW_CAF_VERSION_(MIN|MAX) [0-9]+")
  if(NOT found_line OR NOT range_lines)
    message(FATAL_ERROR "cannot read CAF_VERSION from ${caf_config}: actorflow's CAF extensions "
                        "(actors/caf_ext) need CAF 0.17.x")
  endif()
  string(REGEX REPLACE ".* ([0-9]+)$" "\\1" found "${found_line}")
  foreach(line IN LISTS range_lines)
    string(REGEX REPLACE ".*_(MIN|MAX) ([0-9]+)$" "\\1;\\2" pair "${line}")
    list(GET pair 0 which)
    list(GET pair 1 value)
    set(accepted_${which} ${value})
  endforeach()
  actorflow_caf_version_text(${found} found_text)
  math(EXPR accepted_major "${accepted_MIN} / 10000")
  math(EXPR accepted_minor "(${accepted_MIN} / 100) % 100")
  set(accepted_text "${accepted_major}.${accepted_minor}.x")
  if(found LESS accepted_MIN OR found GREATER accepted_MAX)
    message(FATAL_ERROR
            "CAF ${found_text} found (CAF_VERSION ${found} in ${caf_config}), but actorflow's CAF "
            "extensions (actors/caf_ext) were written for CAF ${accepted_text} "
            "(CAF_VERSION ${accepted_MIN} to ${accepted_MAX}) and patch its internals. Install CAF ${accepted_text} (Debian's libcaf-dev 0.17.6), or port or remove each "
            "extension as actors/caf_ext/README.md describes.")
  endif()
  message(STATUS "CAF ${found_text}: within the range actors/caf_ext accepts")
  set(CAF_VERSION ${found_text} PARENT_SCOPE)
  set(CAF_VERSION_NUMBER ${found} PARENT_SCOPE)
endfunction()

# 1706 -> 0.17.6 (CAF_VERSION is major * 10000 + minor * 100 + patch).
function(actorflow_caf_version_text number out)
  math(EXPR major "${number} / 10000")
  math(EXPR minor "(${number} / 100) % 100")
  math(EXPR patch "${number} % 100")
  set(${out} "${major}.${minor}.${patch}" PARENT_SCOPE)
endfunction()
