#pragma once
// The sim backend's contract (docs/sim-contract.md), implemented here again, apart
// from the code under test, so tests check the system against the contract, not itself.

#include <cstdint>
#include <cstring>
#include <string>

#include <openssl/sha.h>

// The low-level SHA256_* calls are deprecated in OpenSSL 3 but are the plainest reading of
// the contract, which is the point here.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace contract {

inline std::string hex(const unsigned char* d, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[d[i] >> 4];
    s += digits[d[i] & 15];
  }
  return s;
}

/// Latent length under the reference profile: 13,000,000 bytes for 416x736x5, scaled by
/// width x height x seconds, rounded to the nearest byte.
inline uint64_t reference_latent_bytes(uint32_t w, uint32_t h, uint32_t s) {
  long double v = 13000000.0L * w * h * s / (416.0L * 736.0L * 5.0L);
  return static_cast<uint64_t>(v + 0.5L);
}

/// SHA-256 (hex) of the latent of job (seed, w, h, s), `length` bytes long.
inline std::string latent_sha256(uint64_t seed, uint32_t w, uint32_t h, uint32_t s,
                                 uint64_t length) {
  unsigned char msg[18 + 8 + 4 + 4 + 4 + 8];
  std::memcpy(msg, "vidline-sim-latent", 18);
  auto put = [&](std::size_t off, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      msg[off + i] = static_cast<unsigned char>(v >> (8 * i));
  };
  put(18, seed, 8);
  put(26, w, 4);
  put(30, h, 4);
  put(34, s, 4);
  SHA256_CTX whole;
  SHA256_Init(&whole);
  uint64_t left = length;
  for (uint64_t i = 0; left > 0; ++i) {
    put(38, i, 8);
    unsigned char block[32];
    SHA256(msg, sizeof(msg), block);
    std::size_t n = left < 32 ? static_cast<std::size_t>(left) : 32;
    SHA256_Update(&whole, block, n);
    left -= n;
  }
  unsigned char d[32];
  SHA256_Final(d, &whole);
  return hex(d, 32);
}

/// The exact text of the sim decoder's file for a job.
inline std::string video_file(const std::string& latent_sha, uint64_t seed, uint32_t w,
                              uint32_t h, uint32_t s) {
  return "vidline-sim-video 1\nlatent_sha256 " + latent_sha + "\nseed " + std::to_string(seed)
         + "\nsize " + std::to_string(w) + "x" + std::to_string(h) + "\nseconds "
         + std::to_string(s) + "\n";
}

} // namespace contract
