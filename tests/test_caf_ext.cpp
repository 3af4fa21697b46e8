// actors/caf_ext: the CAF it was written for, and the link order its SSL fix
// needs. The configure-time refusal of another CAF is test_caf_version_guard
// (tests/check_caf_version_guard.cmake).
#include <doctest/doctest.h>

#include <caf/config.hpp>
#include <filesystem>
#include <string>

#include "actors/caf_ext/caf_version.hpp"
#include "actors/caf_ext/tls_error_queue.hpp"
#include "actors/run/runtime.hpp"
#include "core/version.hpp"
#include "tests/support/test_certificates.hpp"

using namespace actorflow;

TEST_CASE("the CAF built against is the one actors/caf_ext accepts: 0.17.x") {
  static_assert(caf_ext::caf_version_built == CAF_VERSION);
  CHECK(caf_ext::caf_version_min == 1700);
  CHECK(caf_ext::caf_version_max == 1799);
  CHECK(CAF_VERSION >= caf_ext::caf_version_min);
  CHECK(CAF_VERSION <= caf_ext::caf_version_max);
  CHECK(CAF_MAJOR_VERSION == 0);
  CHECK(CAF_MINOR_VERSION == 17);
}

TEST_CASE("SSL_read and SSL_write resolve to actorflow's, which empty the error queue") {
  CHECK(ssl_interposer_active());
  CHECK_NOTHROW(require_ssl_interposer());
}

TEST_CASE("a runtime with TLS starts: its check of the SSL interposer passes") {
  auto dir = (std::filesystem::temp_directory_path() / "actorflow-caf-ext-tls").string();
  REQUIRE_MESSAGE(testing::make_test_certificates(dir),
                  "openssl failed; see " << dir << "/openssl.log");
  CHECK_NOTHROW(runtime(runtime_options{.tls = testing::test_tls_files(dir, "client")}));
}

TEST_CASE("the version macros are project(VERSION ...)'s") {
  std::string joined = std::to_string(ACTORFLOW_VERSION_MAJOR) + "." +
                       std::to_string(ACTORFLOW_VERSION_MINOR) + "." +
                       std::to_string(ACTORFLOW_VERSION_PATCH);
  CHECK(joined == ACTORFLOW_VERSION);
}
