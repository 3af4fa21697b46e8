// The CAF these extensions were written for. Every file in actors/caf_ext
// includes this header first: they reach into CAF 0.17's internals (the
// work-stealing policy's data, the worker loop, the multiplexer's loop,
// mailbox elements, the OpenSSL session's calls), which CAF changes between
// minor versions without notice. A build against another CAF stops here
// instead of compiling code that silently misbehaves. CMake checks the same
// range at configure time (cmake/caf_version.cmake), reading it from here.
#pragma once
#include <caf/config.hpp>

// CAF_VERSION is major * 10000 + minor * 100 + patch: 0.17.6 is 1706.
#define ACTORFLOW_CAF_VERSION_MIN 1700
#define ACTORFLOW_CAF_VERSION_MAX 1799

static_assert(CAF_VERSION >= ACTORFLOW_CAF_VERSION_MIN && CAF_VERSION <= ACTORFLOW_CAF_VERSION_MAX,
              "actorflow's CAF extensions (actors/caf_ext) were written for CAF 0.17.x and "
              "patch its internals; this CAF is another version. See actors/caf_ext/README.md "
              "for how to port or remove each extension.");

namespace actorflow::caf_ext {

/// The CAF versions (CAF_VERSION's encoding) the extensions accept.
constexpr int caf_version_min = ACTORFLOW_CAF_VERSION_MIN;
constexpr int caf_version_max = ACTORFLOW_CAF_VERSION_MAX;

/// The CAF this library was compiled against.
constexpr int caf_version_built = CAF_VERSION;

}  // namespace actorflow::caf_ext
