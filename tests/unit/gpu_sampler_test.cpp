// The node's GPU sampler (nodes/gpu/sampler.hpp) over the fake NVML (tests/support/
// fake_nvml): one round at a time, driven by hand with the times given, the /metrics
// series it sets checked in the process's registry.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "common/metrics.hpp"
#include "nodes/gpu/sampler.hpp"

using namespace vidline;
namespace fs = std::filesystem;

namespace {

/// One host with one NVIDIA card under pool `p`; no coordinator (no reports sent).
std::shared_ptr<const config::cluster> one_card(const std::string& host) {
  auto c = std::make_shared<config::cluster>();
  config::host h;
  h.name = host;
  config::gpu g;
  g.id = "g0";
  g.vendor = "nvidia";
  g.index = 0;
  h.gpus.push_back(g);
  c->hosts.push_back(h);
  config::pool p;
  p.name = "p";
  p.host = host;
  p.gpus = {"g0"};
  c->pools.push_back(p);
  c->knobs.gpu_hot_s = 30;
  c->knobs.gpu_recover_s = 60;
  return c;
}

} // namespace

TEST_CASE("sampler: Xid events as a counter from 0, the newest code and its time as gauges") {
  const fs::path file = fs::temp_directory_path()
                        / ("vidline-sampler-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << "count 1\n0 temperature 60\n0 slowdown 90\n0 ecc_uncorrected 0\n";
  ::setenv("VIDLINE_FAKE_NVML", file.c_str(), 1);
  nodes::gpu::reader_options o;
  o.nvml_library = FAKE_NVML;
  o.drm_root = "";
  const std::string host = "sampler-test-" + std::to_string(::getpid());
  nodes::gpu::sampler s(one_card(host), host, nullptr, o, false);
  auto& reg = metrics::global();
  const metrics::labels l{{"host", host}, {"gpu", "g0"}, {"pool", "p"}};

  auto r = s.sample_once(1000, 0);
  REQUIRE(r.gpus.size() == 1);
  CHECK(r.gpus[0].xid_events == 0);
  CHECK(reg.value("vidline_gpu_xid_events_total", l) == 0);  // there, at 0
  CHECK(std::isnan(reg.value("vidline_gpu_xid_last_code", l)));  // none yet: absent
  CHECK(reg.value("vidline_gpu_healthy", l) == 1);

  std::ofstream(file, std::ios::app) << "0 xid 13\n0 xid 79\n";
  r = s.sample_once(1010, 10);
  CHECK(r.gpus[0].health == "sick");
  CHECK(reg.value("vidline_gpu_xid_events_total", l) == 2);
  CHECK(reg.value("vidline_gpu_xid_last_code", l) == 79);
  CHECK(reg.value("vidline_gpu_xid_last_timestamp_seconds", l) == 1010);
  CHECK(reg.value("vidline_gpu_healthy", l) == 0);

  // Nothing new: the counter holds; a 13 later adds one, the gauges follow it.
  s.sample_once(1020, 20);
  CHECK(reg.value("vidline_gpu_xid_events_total", l) == 2);
  std::ofstream(file, std::ios::app) << "0 xid 13\n";
  s.sample_once(1030, 30);
  CHECK(reg.value("vidline_gpu_xid_events_total", l) == 3);
  CHECK(reg.value("vidline_gpu_xid_last_code", l) == 13);
  CHECK(reg.value("vidline_gpu_xid_last_timestamp_seconds", l) == 1030);
  const std::string text = reg.render();
  CHECK(text.find("# TYPE vidline_gpu_xid_events_total counter") != std::string::npos);
  CHECK(text.find("vidline_gpu_xid_events_total{gpu=\"g0\",host=\"" + host + "\",pool=\"p\"} 3")
        != std::string::npos);
  std::error_code ec;
  fs::remove(file, ec);
}
