#include "common/crash_points.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

namespace vidline::crash {
namespace {

std::atomic<bool> armed{false};
std::mutex mtx;
std::mt19937_64 rng;
double probability = 0;
std::vector<std::string> names;

} // namespace

const std::vector<std::string>& all_points() {
  static const std::vector<std::string> points{
    "journal.before_append",   // the coordinator is about to write a transaction
    "journal.after_append",    // written and synced, nothing sent yet
    "journal.before_vacuum",   // old runs deleted (committed); free pages not yet reclaimed
    "latent.before_commit",    // the sampler wrote the latent; not yet renamed/receipted
    "latent.after_commit",     // latent and receipt durable; result not yet reported
    "output.during_rename",    // the video file is fsynced under its temporary name
    "video.before_commit",     // the decoder made the video; not yet renamed/receipted
    "video.after_commit",      // video, receipt and ledger line durable; not yet indexed or reported
    "video.after_index",       // video, receipt, ledger and index line durable; not yet reported
    "decoder.after_dequeue",   // the decoder took an order; not yet acknowledged it
    "input.before_fetch",      // the coordinator is about to pull another host's video for a frame
  };
  return points;
}

void arm(unsigned long long seed, double p, const std::vector<std::string>& which) {
  std::lock_guard<std::mutex> lock(mtx);
  rng.seed(seed);
  probability = p;
  names = which;
  armed = p > 0 && !which.empty();
}

void init_from_env() {
  const char* v = std::getenv("VIDLINE_CRASH");
  if (v == nullptr || *v == '\0')
    return;
  std::string s(v);
  auto a = s.find(':');
  auto b = a == std::string::npos ? a : s.find(':', a + 1);
  if (b == std::string::npos)
    throw std::invalid_argument("VIDLINE_CRASH must be SEED:PROBABILITY:NAME[,NAME...], got '" + s + "'");
  unsigned long long seed = 0;
  double p = 0;
  try {
    seed = std::stoull(s.substr(0, a));
    p = std::stod(s.substr(a + 1, b - a - 1));
  } catch (const std::exception&) {
    throw std::invalid_argument("VIDLINE_CRASH: bad seed or probability in '" + s + "'");
  }
  if (!(p >= 0 && p <= 1))
    throw std::invalid_argument("VIDLINE_CRASH: probability must be within 0..1");
  std::vector<std::string> which;
  std::stringstream list(s.substr(b + 1));
  std::string name;
  while (std::getline(list, name, ',')) {
    if (name == "*") {
      which = all_points();
      break;
    }
    const auto& all = all_points();
    if (std::find(all.begin(), all.end(), name) == all.end())
      throw std::invalid_argument("VIDLINE_CRASH: unknown crash point '" + name + "'");
    which.push_back(name);
  }
  arm(seed, p, which);
}

void point(const char* name) {
  if (!armed.load(std::memory_order_relaxed))
    return;
  std::lock_guard<std::mutex> lock(mtx);
  if (std::find(names.begin(), names.end(), name) == names.end())
    return;
  if (std::uniform_real_distribution<double>(0, 1)(rng) >= probability)
    return;
  std::fprintf(stderr, "crash point %s fired\n", name);
  std::fflush(stderr);
  ::_exit(exit_code);
}

} // namespace vidline::crash
