#pragma once
/// Unix socket paths hold at most 107 bytes (sun_path is 108 with its NUL); a longer one
/// fails to bind, and Ray then hangs without an error (docs/reference.md, operational
/// lessons). Backend processes get a short runtime directory, checked here.

#include <cstddef>
#include <string>

namespace vidline::backends::process {

/// The longest Unix socket path the kernel accepts.
inline constexpr std::size_t unix_socket_path_max = 107;

/// What Ray adds under its temp directory for its longest socket:
/// "/ray/session_YYYY-MM-DD_HH-MM-SS_NNNNNN_PPPPP/sockets/plasma_store" (66 bytes; without
/// the "/ray" when the directory is given to ray.init directly, as Raylight does).
inline constexpr std::size_t ray_socket_suffix_bytes = 66;

/// The longest runtime directory that keeps Ray's sockets within the limit (41 bytes).
inline constexpr std::size_t runtime_dir_max = unix_socket_path_max - ray_socket_suffix_bytes;

/// The default runtime directory of a backend process whose files live in `base_dir`:
/// /tmp/vl-<first 12 hex digits of SHA-256(base_dir)> (19 bytes), the same for the same
/// base_dir, different for different ones.
std::string default_runtime_dir(const std::string& base_dir);

/// "" when Ray's sockets under `dir` stay within the limit, else what is wrong and how
/// to fix it.
std::string runtime_dir_problem(const std::string& dir);

} // namespace vidline::backends::process
