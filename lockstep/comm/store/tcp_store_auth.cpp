#include "lockstep/comm/store/tcp_store_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "lockstep/util/error.h"

namespace lockstep::comm {

namespace {
constexpr char kAuthContext[] = "lockstep-store-auth-v1";
}  // namespace

std::string randomJoinToken() {
  auto bytes = detail::authNonce();
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

namespace detail {

std::vector<uint8_t> authNonce() {
  std::vector<uint8_t> n(kAuthNonceBytes);
  LOCKSTEP_ENFORCE(RAND_bytes(n.data(), static_cast<int>(n.size())) == 1, IoError,
                   "OpenSSL's RAND_bytes could not produce random bytes for the store's join token");
  return n;
}

std::vector<uint8_t> authProof(const std::string& token, const std::vector<uint8_t>& nonce) {
  std::vector<uint8_t> msg(kAuthContext, kAuthContext + sizeof kAuthContext);  // with its '\0'
  msg.insert(msg.end(), nonce.begin(), nonce.end());
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  const unsigned char* r = HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), msg.data(),
                                msg.size(), out.data(), &len);
  LOCKSTEP_ENFORCE(r != nullptr && len == kAuthProofBytes, IoError, "OpenSSL's HMAC-SHA256 failed");
  out.resize(len);
  return out;
}

bool authProofMatches(const std::string& token, const std::vector<uint8_t>& nonce,
                      const std::vector<uint8_t>& proof) {
  if (proof.size() != kAuthProofBytes) return false;
  auto expected = authProof(token, nonce);
  return CRYPTO_memcmp(expected.data(), proof.data(), kAuthProofBytes) == 0;
}

}  // namespace detail
}  // namespace lockstep::comm
