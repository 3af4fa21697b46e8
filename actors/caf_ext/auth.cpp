#include "actors/caf_ext/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace actorflow {

std::string random_nonce() {
  std::string bytes(auth_nonce_bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(bytes.size())) !=
      1)
    fail("auth", "the random generator failed");
  return bytes;
}

std::string connection_proof(const std::string& secret, const std::string& role,
                             const std::string& accepting_nonce,
                             const std::string& connecting_nonce) {
  std::string message = "actorflow " + role + "|" + accepting_nonce + "|" + connecting_nonce;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len) ||
      len != auth_proof_bytes)
    fail("auth", "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool same_proof(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string read_secret_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("auth", "cannot read the secret file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) fail("auth", "the secret file '" + path + "' is empty");
  return secret;
}

}  // namespace actorflow
