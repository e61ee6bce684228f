#pragma once
/// Inputs: the reference images of shots, content-addressed by SHA-256 on the hosts that
/// use them (docs/shots.md, "References travel"; PROTOCOL.md, "Inputs").
///
/// `vidline run` uploads each distinct reference image to the coordinator's node before it
/// submits (input_put, in order, one chunk of knobs.chunk_bytes per request); HTTP clients
/// upload with `PUT /v1/inputs/{sha256}`. The node keeps it at <data_dir>/inputs/<sha256>:
/// written to a part file, hashed as it comes, verified, fsynced and renamed; an input
/// already there is not rewritten. The sampling host pulls it from the coordinator's host
/// with latent_fetch kind "input" into its own <data_dir>/inputs/ (the data plane, verified
/// by the receiver as a latent is) and checks its SHA-256 again before the backend sees it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/data_paths.hpp"
#include "common/sha256.hpp"
#include "config/knobs.hpp"
#include "messages/messages.hpp"

namespace vidline::nodes::data {

/// The largest input (reference image) a host stores or a client uploads, in bytes.
inline constexpr uint64_t max_input_bytes = 64ull << 20;

/// The folder of a host's inputs under its data_dir.
using data_paths::inputs_subdir;

/// A host's stored inputs, <dir>/<sha256>. Not thread-safe: one owner thread (the bus's I/O
/// thread, or the HTTP server's). Two stores on one folder are safe: each upload writes its
/// own part file and the rename is atomic.
class input_store {
public:
  /// `dir` is created on the first write.
  explicit input_store(std::string dir, uint64_t max_bytes = max_input_bytes);
  ~input_store();
  input_store(const input_store&) = delete;
  input_store& operator=(const input_store&) = delete;

  const std::string& dir() const { return dir_; }

  /// The size of the stored input `sha256` (a regular file of that name), none when it is
  /// not stored (or `sha256` is not 64 lowercase hex digits).
  std::optional<uint64_t> size_of(const std::string& sha256) const;

  /// One input_put from uploader `who` (the client's connection): the reply to send.
  msg::input_put_reply put(const std::string& who, const msg::input_put& p);

  /// How a whole upload (HTTP PUT) ended.
  struct whole_result {
    int status = 0;         ///< 201 stored now, 200 already stored, 400 bad, 413 too large,
                            ///< 500 could not write
    std::string error;      ///< why not, when status >= 400
  };
  /// Stores `body` as input `sha256` after checking its digest.
  whole_result put_whole(const std::string& sha256, std::string_view body);

  /// Uploads in progress (at most max_uploads; the oldest is dropped for a new one).
  std::size_t uploads() const { return uploads_.size(); }

  static constexpr std::size_t max_uploads = 16;

private:
  struct upload {
    std::string sha256;
    std::string part;
    int fd = -1;
    vidline::sha256 hash;
    uint64_t next = 0;
    uint64_t total = 0;
    uint64_t touched = 0;  ///< order of last use (for dropping the oldest)
  };
  void drop(std::map<std::string, upload>::iterator it);
  std::string new_part(const std::string& sha256);
  /// Fsyncs, verifies and renames a complete part: "" or why not (the part removed).
  std::string finish(upload& u);

  std::string dir_;
  uint64_t max_bytes_;
  uint64_t counter_ = 0;
  std::map<std::string, upload> uploads_;  ///< by who + " " + sha256
};

} // namespace vidline::nodes::data
