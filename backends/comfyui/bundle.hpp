#pragma once
/// The latent a comfyui sampler hands over: its SaveLatent files (video, audio, ...) in
/// one POSIX ustar archive, so the line moves, hashes and stores one file per job as it
/// does for every backend. `tar tvf x.latent` lists it; `tar xf` unpacks it.
///
/// Members are regular files named "<part>.latent", part = [a-z0-9_]{1,32}, in the order
/// given; nothing else is written or accepted (no paths, links or devices).

#include <string>
#include <utility>
#include <vector>

namespace vidline::backends::comfyui {

/// One member: its part name ("video") and the file holding its bytes.
struct bundle_part {
  std::string part;
  std::string path;
};

/// Whether `part` is a valid part name.
bool valid_part_name(const std::string& part);

/// Writes `parts` into a ustar archive at `path` (created or truncated). Throws
/// std::runtime_error naming the file on an I/O error or an invalid part name.
void write_bundle(const std::string& path, const std::vector<bundle_part>& parts);

/// Unpacks the archive at `path` into `dir` (which must exist) as "<dir>/<part>.latent";
/// returns the parts in archive order. Throws std::runtime_error when it is not such an
/// archive (bad checksum, a member that is not "<part>.latent", truncated, ...).
std::vector<bundle_part> read_bundle(const std::string& path, const std::string& dir);

} // namespace vidline::backends::comfyui
