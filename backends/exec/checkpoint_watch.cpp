#include "backends/exec/checkpoint_watch.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>

namespace vidline::backends::exec {
namespace {

namespace fs = std::filesystem;

/// The step of a `<digits>.ckpt` name; 0 for any other name.
uint32_t step_of(const std::string& name) {
  const std::string ext = ".ckpt";
  if (name.size() <= ext.size() || name.size() > ext.size() + 9
      || name.compare(name.size() - ext.size(), ext.size(), ext) != 0)
    return 0;
  const std::string digits = name.substr(0, name.size() - ext.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  return static_cast<uint32_t>(std::stoul(digits));
}

} // namespace

checkpoint_watch::checkpoint_watch(const stage_env& env) : env_(env) {
  if (env_.checkpoint_dir.empty() || !env_.checkpoint)
    return;
  last_step_ = env_.resume_step;
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      look();
      for (int i = 0; i < interval_ms / 10 && !stop_.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
}

checkpoint_watch::~checkpoint_watch() { stop(); }

void checkpoint_watch::stop() {
  if (!thread_.joinable())
    return;
  stop_ = true;
  thread_.join();
  look();
}

void checkpoint_watch::look() {
  if (env_.checkpoint_dir.empty() || !env_.checkpoint)
    return;
  std::map<uint32_t, std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(env_.checkpoint_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const uint32_t step = step_of(it->path().filename().string());
    if (step != 0 && it->is_regular_file(ec))
      found[step] = it->path().string();
  }
  for (auto& [step, path] : found) {
    if (step <= last_step_) {
      fs::remove(path, ec);
      continue;
    }
    if (env_.checkpoint(step, 0, path))
      last_step_ = step;
  }
}

} // namespace vidline::backends::exec
