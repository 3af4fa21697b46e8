// Certificates for trying TLS between cluster tasks on one machine (tests and
// benchmarks): a throwaway CA, a node and a client certificate it signs, and
// a self-signed stranger, made with the openssl command-line tool.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

#include "actors/run/runtime.hpp"

namespace actorflow::testing {

/// Writes ca.pem, node.pem/.key, client.pem/.key and stranger.pem/.key into
/// `dir` (created if missing), valid for two days. False when openssl is
/// missing or fails; its output is in dir/openssl.log.
inline bool make_test_certificates(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::string script =
      "cd '" + dir +
      "' && "
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
      "-subj /CN=actorflow-test-ca && "
      "for n in node client; do "
      "openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj /CN=$n && "
      "openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem -days 2 "
      "|| exit 1; done && "
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout stranger.key -out stranger.pem -days 2 "
      "-subj /CN=stranger";
  return std::system(("(" + script + ") > '" + dir + "/openssl.log' 2>&1").c_str()) == 0;
}

/// The TLS files of `who` (node, client, stranger) in `dir`, trusting `ca`.
inline tls_files test_tls_files(const std::string& dir, const std::string& who,
                                const std::string& ca = "ca") {
  return {dir + "/" + who + ".pem", dir + "/" + who + ".key", dir + "/" + ca + ".pem"};
}

}  // namespace actorflow::testing
