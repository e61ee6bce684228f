#include "actors/inputs.hpp"

#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include <spdlog/spdlog.h>

#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::actors {
namespace {

/// One lock per input digest, for the process: a second pool waits for the first's fetch.
std::shared_ptr<std::mutex> lock_of(const std::string& sha) {
  static std::mutex m;
  static std::map<std::string, std::weak_ptr<std::mutex>> locks;
  std::lock_guard<std::mutex> l(m);
  auto& w = locks[sha];
  auto p = w.lock();
  if (!p) {
    p = std::make_shared<std::mutex>();
    w = p;
  }
  for (auto it = locks.begin(); it != locks.end();)
    it = it->second.expired() ? locks.erase(it) : std::next(it);
  return p;
}

/// "" when `path` holds bytes of digest `sha` and size `bytes` (0: any size), else why not.
std::string verify(const std::string& path, const std::string& sha, uint64_t bytes) {
  uint64_t size = 0;
  const std::string got = sha256_file_hex(path, &size);
  if (got.empty())
    return "cannot read " + path;
  if (got != sha)
    return path + " hashes to " + got + ", not " + sha;
  if (bytes != 0 && size != bytes)
    return path + " is " + std::to_string(size) + " bytes, not " + std::to_string(bytes);
  return "";
}

} // namespace

input_ready ensure_input(const context& ctx, const std::string& source_host,
                         const std::string& sha, uint64_t bytes,
                         const std::atomic<bool>* cancel) {
  input_ready r;
  if (!is_sha256_hex(sha)) {
    r.error = "reference_sha256 is not 64 lowercase hex digits";
    return r;
  }
  const std::string dir = input_dir(ctx);
  const std::string path = data_paths::by_digest(dir, sha);
  auto lock = lock_of(sha);
  std::lock_guard<std::mutex> hold(*lock);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    auto why = verify(path, sha, bytes);
    if (why.empty()) {
      // In use: the sweep removes an input untouched for input_retention_s (sweep.hpp).
      std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now(), ec);
      r.path = path;
      return r;
    }
    if (ctx.host == source_host) {
      r.error = "the uploaded reference image " + why;
      return r;
    }
    spdlog::warn("input {}: the local copy {}: removed, pulled again from {}", sha, why,
                 source_host);
    std::filesystem::remove(path, ec);
  }
  if (ctx.host == source_host) {
    r.error = "reference image " + sha + " is not in " + dir +
              " on the coordinator's host (never uploaded, or removed)";
    return r;
  }
  if (bytes == 0) {
    r.error = "reference image " + sha + " has no size in the job (a coordinator older than "
              "uploads): it cannot be pulled";
    return r;
  }
  try {
    files::make_dirs(dir);
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  auto done = std::make_shared<std::promise<fetch_result>>();
  auto result = done->get_future();
  ctx.out->fetch_input(source_host, sha, bytes, path,
                       [done](fetch_result f) { done->set_value(std::move(f)); });
  while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (cancel != nullptr && cancel->load()) {
      r.error = "cancelled";  // the fetch ends by itself; its file is kept if verified
      return r;
    }
  }
  const auto f = result.get();
  if (f.outcome != "ok") {
    r.error = "reference image " + sha + " could not be pulled from " + source_host + " (" +
              f.outcome + "): " + f.error;
    return r;
  }
  // The receiver verified it as it came; checked once more as the backend will see it.
  if (auto why = verify(path, sha, bytes); !why.empty()) {
    std::filesystem::remove(path, ec);
    r.error = "the pulled reference image " + why;
    return r;
  }
  spdlog::info("input {}: pulled from {} ({} bytes, {:.0f} ms)", sha, source_host, f.bytes,
               f.elapsed_ms);
  r.path = path;
  r.fetched = true;
  return r;
}

} // namespace vidline::actors
