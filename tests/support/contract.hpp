#pragma once
// The sim backend's contract (docs/sim-contract.md), implemented here again, apart
// from the code under test, so tests check the system against the contract, not itself.

#include <cstdint>
#include <cstring>
#include <map>
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

inline std::string sha256_hex(const std::string& text) {
  unsigned char d[32];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), d);
  return hex(d, 32);
}

/// What a shot says, as version 2 of the contract reads it.
struct shot_ident {
  std::string prompt;
  std::string negative_prompt;          ///< "" = none
  std::string workflow = "default";     ///< a sim backend's implicit default workflow
  std::string model;                    ///< that workflow's model key (the backend's name)
  std::map<std::string, std::string> params;  ///< name -> text of the value (std::map: byte order)
  std::map<std::string, std::string> inputs;  ///< name -> hex SHA-256 of the file
};

/// The ident's text: one line per field, each ending in "\n".
inline std::string ident_text(const shot_ident& s) {
  std::string t = "prompt=" + sha256_hex(s.prompt) + "\n";
  t += "negative_prompt=" + sha256_hex(s.negative_prompt) + "\n";
  t += "workflow=" + s.workflow + "\n";
  t += "model=" + s.model + "\n";
  for (auto& [n, v] : s.params)
    t += "param." + n + "=" + v + "\n";
  for (auto& [n, v] : s.inputs)
    t += "input." + n + "=" + v + "\n";
  return t;
}

/// The 32 raw bytes of the ident.
inline std::string ident(const shot_ident& s) {
  const std::string t = ident_text(s);
  unsigned char d[32];
  SHA256(reinterpret_cast<const unsigned char*>(t.data()), t.size(), d);
  return std::string(reinterpret_cast<const char*>(d), 32);
}

/// SHA-256 (hex) of the latent of job (seed, w, h, s) with `ident` (32 raw bytes),
/// `length` bytes long (version 2).
inline std::string latent_sha256(uint64_t seed, uint32_t w, uint32_t h, uint32_t s,
                                 uint64_t length, const std::string& ident) {
  unsigned char msg[18 + 8 + 4 + 4 + 4 + 8 + 32];
  std::memcpy(msg, "vidline-sim-latent", 18);
  auto put = [&](std::size_t off, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      msg[off + i] = static_cast<unsigned char>(v >> (8 * i));
  };
  put(18, seed, 8);
  put(26, w, 4);
  put(30, h, 4);
  put(34, s, 4);
  std::memcpy(msg + 46, ident.data(), 32);
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

/// SHA-256 (hex) of the latent of version 1 (no ident): what the exec tests' own sampler
/// script (tests/support/programs/sim_latent.sh) writes.
inline std::string latent_sha256_v1(uint64_t seed, uint32_t w, uint32_t h, uint32_t s,
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
