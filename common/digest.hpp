#pragma once
/// SHA-256 over OpenSSL's EVP interface (SHA-NI where the CPU has it), incremental, of
/// bytes in memory, and the hex form digests travel in. Pure computation: no I/O, so the
/// state machines use it as the nodes do (a file's digest: common/sha256.hpp).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace vidline {

using digest = std::array<uint8_t, 32>;

/// An incremental SHA-256.
class sha256 {
public:
  sha256();
  ~sha256();
  sha256(sha256&&) noexcept;
  sha256& operator=(sha256&&) noexcept;
  sha256(const sha256&) = delete;
  sha256& operator=(const sha256&) = delete;

  void update(const void* data, std::size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  /// The digest of everything given so far; the object must not be updated afterwards.
  digest finish();
  /// The digest of everything given so far, leaving the object free to go on.
  digest peek() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// SHA-256 of a buffer.
digest sha256_of(const void* data, std::size_t size);
inline digest sha256_of(std::string_view s) { return sha256_of(s.data(), s.size()); }

/// Lowercase hex of a digest (64 characters).
std::string to_hex(const digest& d);

/// True when `s` is 64 lowercase hex digits.
bool is_sha256_hex(std::string_view s);

} // namespace vidline
