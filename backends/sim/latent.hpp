#pragma once
/// The latent a `sim` sampler produces, exactly as docs/sim-contract.md fixes
/// it (version 2), so that anyone can recompute any job's latent and its SHA-256 from the
/// job alone:
///
///     block(i) = SHA-256("vidline-sim-latent" || u64le(seed) || u32le(width)
///                        || u32le(height) || u32le(seconds) || u64le(i) || ident)
///     latent   = block(0) || block(1) || ...   truncated to latent_bytes(...)
///
/// where `ident` is the 32-byte SHA-256 of the shot's identity text (prompt, negative prompt,
/// workflow, model, params, input digests: config::ident).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/sha256.hpp"
#include "config/profile/profile.hpp"

namespace vidline::backends::sim {

using config::profile::profile;  // the latent's length comes from the timing profile

/// What a latent is a function of: the job's seed, size and ident.
struct latent_key {
  uint64_t seed = 0;
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t seconds = 0;
  digest ident{};  ///< config::ident(job): what the shot says
};

/// Length of a latent under profile `p`: the profile's reference length scaled by
/// width x height x seconds, rounded to the nearest byte (halves round up). 13,000,000
/// for 416x736x5 in the reference profile. 0 when any dimension is 0.
uint64_t latent_bytes(const profile& p, uint32_t width, uint32_t height, uint32_t seconds);

/// Block `i` of a latent, computed the plain way (one SHA-256 of the 78-byte message).
digest block(const latent_key& key, uint64_t i);

/// Produces a latent's bytes in order, a piece at a time, and hashes them on the way.
///
/// The 38-byte prefix is absorbed once into an OpenSSL context; each block is a copy of
/// that context plus the 8-byte index and the 32-byte ident (78 bytes in all: two SHA-256
/// compressions per block).
class latent_generator {
public:
  /// Bytes per piece (a multiple of 32, so only the last block is ever truncated).
  static constexpr std::size_t piece_bytes = std::size_t{1} << 20;

  latent_generator(const latent_key& key, uint64_t total_bytes);
  ~latent_generator();
  latent_generator(latent_generator&&) noexcept;
  latent_generator& operator=(latent_generator&&) noexcept;
  latent_generator(const latent_generator&) = delete;
  latent_generator& operator=(const latent_generator&) = delete;

  /// The next piece (at most piece_bytes; empty once done). Valid until the next call.
  std::string_view next();

  bool done() const noexcept;
  uint64_t produced() const noexcept;
  uint64_t total() const noexcept;

  /// Lowercase hex SHA-256 of the whole latent. Only when done(); call once.
  std::string sha256_hex();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Receives one piece of a latent; returns false to stop the generation.
using latent_sink = std::function<bool(std::string_view piece)>;

/// Streams a whole latent to `sink`. Returns its hex SHA-256, or nullopt when the sink
/// stopped it.
std::optional<std::string> generate_latent(const latent_key& key, uint64_t total_bytes,
                                           const latent_sink& sink);

/// Writes a latent to `path` (created or truncated) and fsyncs it. Between pieces it asks
/// `keep_going` (when given); on false it removes the file and returns nullopt. Returns the
/// hex SHA-256. Throws std::runtime_error naming the path on an I/O error (file removed).
std::optional<std::string> write_latent_file(const latent_key& key, uint64_t total_bytes,
                                             const std::string& path,
                                             const std::function<bool()>& keep_going = {});

} // namespace vidline::backends::sim
