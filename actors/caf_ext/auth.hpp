// Proof of a shared cluster secret, for the handshake every plain connection
// between a cluster's processes opens with (actors/caf_ext/guarded_connection.hpp).
// Each side sends a fresh random nonce; each then proves the secret with
// HMAC-SHA256(secret, its role || accepting side's nonce || connecting side's
// nonce). The secret never crosses the network; a recorded proof is useless
// on another connection (other nonces), and a proof cannot be reflected back
// to its sender (the role differs).
#pragma once
#include <string>

namespace actorflow {

/// Bytes of a nonce and of a proof.
constexpr size_t auth_nonce_bytes = 32;
constexpr size_t auth_proof_bytes = 32;

/// `auth_nonce_bytes` random bytes from OpenSSL's generator.
std::string random_nonce();
/// The proof a side in `role` ("accepting" or "connecting") gives for the
/// connection with these two nonces: raw HMAC-SHA256 bytes.
std::string connection_proof(const std::string& secret, const std::string& role,
                             const std::string& accepting_nonce,
                             const std::string& connecting_nonce);
/// Constant-time comparison of two proofs.
bool same_proof(const std::string& a, const std::string& b);
/// Reads a secret from a file (trailing newlines dropped); throws naming the file.
std::string read_secret_file(const std::string& path);

}  // namespace actorflow
