/// A host that collects every run's videos by itself (run_collection.hpp, docs/shots.md).

#include "nodes/run_collection.hpp"

#include <chrono>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/metrics.hpp"
#include "nodes/verbs/collect.hpp"
#include "nodes/verbs/commands.hpp"

namespace vidline::nodes {

using nlohmann::json;
using steady = std::chrono::steady_clock;

run_collection::run_collection(std::shared_ptr<const config::cluster> c, std::string host)
    : c_(std::move(c)), host_(std::move(host)) {
  dir_ = c_->find_host(host_)->collect_dir;
  spdlog::info("collecting every run's videos into {}/<run id>/", dir_);
  thread_ = std::thread([this] { loop(); });
}

run_collection::~run_collection() {
  {
    std::lock_guard<std::mutex> l(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void run_collection::loop() {
  const auto interval = std::chrono::milliseconds(c_->knobs.collect_interval_ms);
  for (;;) {
    try {
      turn();
    } catch (const std::exception& e) {
      spdlog::warn("collecting videos: {}", e.what());
    }
    std::unique_lock<std::mutex> l(m_);
    if (cv_.wait_for(l, interval, [this] { return stop_; }))
      return;
  }
}

void run_collection::turn() {
  verbs::coordinator_client cl(*c_);
  json list;
  try {
    list = cl.runs(true, 5000);
  } catch (const verbs::coordinator_error& e) {
    spdlog::debug("collecting videos: the coordinator's runs: {}", e.what());
    return;  // not up yet, or down: next turn
  }
  if (!list.is_array())
    return;
  auto stopping = [this] {
    std::lock_guard<std::mutex> l(m_);
    return stop_;
  };
  // A finished run whose videos could not all be fetched is asked again this much later (a
  // host that is down costs one timeout per try).
  const auto retry_after = std::chrono::milliseconds(10LL * c_->knobs.collect_interval_ms);
  std::set<std::string> listed;
  for (const auto& r : list) {
    if (stopping())
      return;
    const std::string id = r.value("run_id", "");
    if (id.empty())
      continue;
    listed.insert(id);
    const bool finished = r.value("state", "") != "running";
    const uint32_t succeeded = r.value("succeeded", 0u);
    const uint64_t verdicts = r.value("verdicts", uint64_t{0});
    auto& seen = runs_[id];
    if (succeeded == seen.succeeded && verdicts == seen.verdicts
        && (!finished || seen.complete))
      continue;  // nothing new (an open run's failed videos wait for its end)
    if (seen.k && seen.k->report().failed > 0 && steady::now() < seen.retry_at &&
        succeeded == seen.succeeded)
      continue;
    const std::string dir = dir_ + "/" + id;
    if (!seen.k) {
      try {
        seen.k = std::make_unique<verbs::collector>(*c_, dir);
      } catch (const std::exception& e) {
        if (seen.told.insert(e.what()).second)
          spdlog::error("cannot collect run {}: {}", id, e.what());
        continue;
      }
    }
    const uint32_t before = seen.k->report().collected;
    // Page by page, so a stop waits for one page at most.
    const uint32_t limit = std::max<uint32_t>(1, cl.page_jobs());
    bool read_all = true;
    for (uint32_t offset = 0;;) {
      std::optional<json> page;
      try {
        page = cl.status_page(id, offset, limit, 5000);
      } catch (const verbs::coordinator_error&) {
        page.reset();  // forgotten meanwhile, or refused: as if not answered
      }
      if (!page || !page->contains("page")) {
        read_all = false;
        break;
      }
      seen.k->pass(*page, finished);
      const auto& p = (*page)["page"];
      offset = p.value("offset", 0u) + p.value("jobs", 0u);
      if (p.value("jobs", 0u) == 0 || offset >= p.value("jobs_total", 0u) || stopping())
        break;
    }
    const auto& rep = seen.k->report();
    if (rep.collected > before) {
      metrics::global().add("vidline_videos_collected_total", {{"host", host_}},
                            rep.collected - before);
      spdlog::info("run {}: collected {} video(s) into {} ({} in all)", id,
                   rep.collected - before, dir, rep.collected + rep.already);
    }
    for (const auto& why : rep.problems)
      if (seen.told.insert(why).second)
        spdlog::warn("run {}: {}", id, why);
    if (!read_all || stopping())
      continue;  // the counts are asked again next turn
    seen.succeeded = succeeded;
    seen.verdicts = verdicts;
    seen.complete = finished && rep.failed == 0;
    seen.retry_at = steady::now() + retry_after;
  }
  // Runs the coordinator no longer holds: nothing more will come of them.
  for (auto it = runs_.begin(); it != runs_.end();)
    it = listed.count(it->first) ? std::next(it) : runs_.erase(it);
  uint32_t missing = 0;
  for (const auto& [id, seen] : runs_)
    if (seen.k)
      missing += seen.k->report().failed + seen.k->report().refused;
  metrics::global().set("vidline_videos_not_collected", {{"host", host_}}, missing);
}

} // namespace vidline::nodes
