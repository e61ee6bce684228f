#include "backends/sim/gpu_models.hpp"

#include <atomic>
#include <map>
#include <mutex>

namespace vidline::backends::sim {
namespace {

std::mutex mutex;
// (host, GPU id) -> (holder, model)
std::map<std::pair<std::string, std::string>, std::pair<uint64_t, std::string>> holder_of;
std::atomic<uint64_t> next_holder{1};

} // namespace

uint64_t new_gpu_holder() { return next_holder++; }

bool load_on_gpus(uint64_t holder, const std::string& host, const std::vector<std::string>& gpus,
                  const std::string& model) {
  std::lock_guard<std::mutex> lock(mutex);
  bool held = true;
  for (auto& g : gpus) {
    auto& h = holder_of[{host, g}];
    held = held && h.first == holder && h.second == model;
    h = {holder, model};
  }
  return held;
}

} // namespace vidline::backends::sim
