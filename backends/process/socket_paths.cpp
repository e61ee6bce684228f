#include "backends/process/socket_paths.hpp"

#include "common/sha256.hpp"

namespace vidline::backends::process {

std::string default_runtime_dir(const std::string& base_dir) {
  return "/tmp/vl-" + to_hex(sha256_of(base_dir)).substr(0, 12);
}

std::string runtime_dir_problem(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/')
    d.pop_back();
  if (d.size() <= runtime_dir_max)
    return "";
  return d + " is " + std::to_string(d.size()) + " bytes: Ray's sockets under it would be " +
         std::to_string(d.size() + ray_socket_suffix_bytes) + " bytes, over the " +
         std::to_string(unix_socket_path_max) +
         "-byte limit of Unix socket paths (Ray then hangs without an error); use a "
         "directory of at most " +
         std::to_string(runtime_dir_max) + " bytes, e.g. /tmp/vl-<short name>";
}

} // namespace vidline::backends::process
