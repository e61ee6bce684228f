#pragma once
/// Durable file operations: every product of a stage is written to a temporary file,
/// fsynced, renamed into place, and its directory fsynced, so a crash leaves either the
/// whole file or none of it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/names.hpp"

namespace vidline::files {

/// Writes `contents` to `path` atomically and durably. Throws std::runtime_error naming
/// the path and the errno text on failure. `crash_point` (crash_points.hpp), if given, is
/// tried between the fsync of the temporary file and the rename.
void write_atomic(const std::string& path, std::string_view contents,
                  const char* crash_point = nullptr);

/// fsyncs the file at `path`. Throws on failure.
void fsync_file(const std::string& path);

/// fsyncs the directory `dir` (after a rename or create inside it). Throws on failure.
void fsync_dir(const std::string& dir);

/// Renames `from` to `to` and fsyncs `to`'s directory. Throws on failure.
void rename_durable(const std::string& from, const std::string& to);

/// Creates `dir` and its parents (like mkdir -p). Throws on failure.
void make_dirs(const std::string& dir);

/// Reads a whole file. Throws on failure.
std::string read_all(const std::string& path);

/// The name checks (common/names.hpp), here too beside the file operations that need them.
using names::is_plain_name;
using names::is_safe_name;

/// The directory part of a path ("." when there is none).
std::string parent_of(const std::string& path);

/// The `n`th rotated name of a log, as spdlog's rotating sink names them:
/// rotated_name("logs/worker.log", 2) = "logs/worker.2.log".
std::string rotated_name(const std::string& path, int n);

/// Caps a log another process appends to (O_APPEND): when it holds more than `max_bytes`,
/// shifts path.1 .. path.(keep-1) up by one (path.keep is dropped), copies it to path.1
/// and truncates it, so at most max_bytes x (keep + 1) of it stay (plus what is written
/// until the next call). The writer's next append lands at the new end; lines written
/// between the copy and the truncation are lost (logrotate's copytruncate). Returns
/// whether it rotated; never throws (a log that cannot be rotated is left as it is).
bool cap_appended_log(const std::string& path, uint64_t max_bytes, int keep);

/// Copies `from` to `dest` durably (a `.part` file hashed as it is written, fsynced,
/// renamed, the directory fsynced) when its bytes hash to `sha`: "" on success (`bytes` its
/// size), else why not (nothing left at `dest`).
std::string copy_verified(const std::string& from, const std::string& sha, const std::string& dest,
                          uint64_t& bytes);

} // namespace vidline::files
