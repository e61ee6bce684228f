#include "nodes/http_video.hpp"

#include <filesystem>
#include <mutex>

#include "common/files.hpp"
#include "nodes/verbs/collect.hpp"

namespace vidline::nodes {

namespace {

/// One fetch at a time: two requests for a video not yet here pull it once.
std::mutex fetch_mutex;

bool is_hex_digest(const std::string& s) {
  if (s.size() != 64)
    return false;
  for (char ch : s)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
      return false;
  return true;
}

} // namespace

std::string local_video(const config::cluster& c, const config::host& self,
                        const std::string& run_id, const nlohmann::json& job, std::string& why,
                        int& status) {
  const std::string path = job.value("output", "");
  const std::string outputs = self.data_dir + "/outputs/" + run_id + "/";
  std::error_code ec;
  if (path.rfind(outputs, 0) == 0 && path.find("/..") == std::string::npos &&
      std::filesystem::is_regular_file(path, ec))
    return path;
  // Elsewhere: its decoder's host has it, by digest.
  const std::string sha = job.contains("output_sha256") && job["output_sha256"].is_string()
                            ? job["output_sha256"].get<std::string>()
                            : "";
  const std::string decoder = job.contains("decoder") && job["decoder"].is_string()
                                ? job["decoder"].get<std::string>()
                                : "";
  const auto* d = c.find_decoder(decoder);
  if (d == nullptr || d->host == self.name || !is_hex_digest(sha)) {
    why = "the video of job " + std::to_string(job.value("index", 0u)) + " is not on this host" +
          (d == nullptr ? " (its decoder is unknown)" : "");
    status = 404;
    return "";
  }
  const auto ext = std::filesystem::path(path).extension().string();
  const std::string dir = self.data_dir + "/" + review_subdir;
  const std::string dest = dir + "/" + sha + (ext.size() <= 8 ? ext : "");
  std::lock_guard<std::mutex> l(fetch_mutex);
  if (std::filesystem::is_regular_file(dest, ec))
    return dest;  // written only once verified (fetch_output renames it into place)
  try {
    files::make_dirs(dir);
  } catch (const std::exception& e) {
    why = e.what();
    status = 500;
    return "";
  }
  uint64_t bytes = 0;
  if (auto w = verbs::fetch_output(c, d->host, sha, dest, bytes); !w.empty()) {
    why = "the video of job " + std::to_string(job.value("index", 0u)) + " lies on host " +
          d->host + " and could not be fetched from it: " + w;
    status = 502;
    return "";
  }
  return dest;
}

} // namespace vidline::nodes
