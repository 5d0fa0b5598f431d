#pragma once
// The join token of a TCPStore (docs/security.md): a shared secret that every client proves it
// holds before the server reads or writes any key for it. The server sends a fresh random nonce
// per connection; the client answers HMAC-SHA256(token, kAuthContext || nonce) (OpenSSL's
// libcrypto); the server compares in constant time. The token itself never crosses the wire and
// a recorded answer is worthless on another connection. Traffic after the handshake is neither
// encrypted nor integrity-protected.
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::comm {

/// A fresh random join token: 32 bytes from OpenSSL's RAND_bytes as 64 hex digits. Thread-safe.
std::string randomJoinToken();

namespace detail {

inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthProofBytes = 32;  // SHA-256

/// kAuthNonceBytes random bytes (RAND_bytes; IoError when the generator fails).
std::vector<uint8_t> authNonce();
/// The answer to `nonce` for `token`: HMAC-SHA256(token, "lockstep-store-auth-v1" || nonce).
std::vector<uint8_t> authProof(const std::string& token, const std::vector<uint8_t>& nonce);
/// Whether `proof` answers `nonce` for `token`; constant time in the proof's content.
bool authProofMatches(const std::string& token, const std::vector<uint8_t>& nonce,
                      const std::vector<uint8_t>& proof);

}  // namespace detail
}  // namespace lockstep::comm
