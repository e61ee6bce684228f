#pragma once
/// A node's logger: every line once, in `<data_dir>/logs/node.log`, rotated at
/// `knobs.log_file_bytes` with `knobs.log_files` older files kept (node.1.log the newest).
///
/// Standard error gets the lines too when it is a terminal, a pipe or a socket (a node in
/// the foreground, or under systemd's journal). When it is a regular file, as
/// `vidline start` makes it (`logs/node.out`), it gets only critical lines (the reason a
/// node exits at once, which `start` shows): node.out then holds what is not a log line,
/// a crash's own output, and never repeats the log or grows with it.

#include <cstdint>
#include <memory>
#include <string>

#include <spdlog/logger.h>

namespace vidline::nodes {

/// Whether file descriptor `fd` is a regular file (a redirection into a file).
bool is_regular_file(int fd);

/// The logger named `name`, writing `dir`/node.log as described above; `stderr_is_file`
/// says which of the two cases standard error is.
std::shared_ptr<spdlog::logger> make_node_logger(const std::string& dir, const std::string& name,
                                                 uint32_t file_bytes, int files,
                                                 bool stderr_is_file);

} // namespace vidline::nodes
