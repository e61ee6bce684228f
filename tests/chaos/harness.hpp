#pragma once
// The fault-injection campaign: real node processes on loopback, a seeded batch, 1-3 seeded
// faults (kill -9 of a node, the coordinator's included; SIGSTOP for 1-6 s then SIGCONT, of
// any host, the coordinator's and the decoders' included; named crash points), nodes
// restarted as a service manager would, and an invariant checker that does not trust the
// coordinator: it recomputes every latent from the sim contract, reads every video file on
// every host and every host's work ledger. Some modes decode on two hosts, so a stage
// given up on can be done again elsewhere.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/crash_points.hpp"
#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "tests/support/contract.hpp"
#include "tests/chaos/host_faults.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

namespace chaos {

using nlohmann::json;
using testing_support::process;

/// What the checker found in one scenario.
struct verdict {
  uint64_t seed = 0;
  int jobs = 0;
  int succeeded = 0;
  int lost = 0;          ///< no correct video file and not reported failed
  int failed = 0;        ///< reported failed by the coordinator (allowed, counted)
  int duplicated = 0;    ///< a job decoded to completion more than once (ledgers or files)
  int reported_twice = 0;  ///< stages done twice as the run's status counts them
  int fenced = 0;        ///< products removed unpublished: their lease had ended (info)
  /// GPU-seconds of sampling paid twice as the run's status counts them (run clock): the
  /// work redone after faults, from each lost attempt's newest checkpoint.
  double gpu_s_paid_twice = 0;
  /// Sampling attempts that ended without their latent (the status's failed attempts of
  /// stage "sampling"): each one's work since its newest checkpoint is paid twice.
  int sampling_lost = 0;
  /// Of those, the GPU-seconds paid twice per GPU of the pool that lost it (run clock),
  /// per job: the job's gpu_s_paid_twice over the GPUs of its lost attempts' pools.
  std::vector<double> paid_per_lost_attempt_s;
  int corrupt = 0;       ///< a video file whose contents break the contract
  int unfinished = 0;    ///< the run did not end within the deadline
  int resampled = 0;     ///< a latent sampled again after it was finished (info)
  int faults = 0;
  int kills = 0;         ///< kill -9 delivered
  int stops = 0;         ///< SIGSTOP/SIGCONT delivered
  int crash_exits = 0;   ///< nodes that exited through a crash point (code 86)
  int link_cuts = 0;     ///< links cut (all traffic between the nodes dropped) and restored
  int full_disks = 0;    ///< data directories filled to the last byte, then emptied
  int backend_faults = 0;  ///< stages that crashed or hung past their timeout (from the
                           ///< coordinator's log)
  std::vector<std::string> notes;
  bool ok() const { return lost == 0 && duplicated == 0 && corrupt == 0 && unfinished == 0; }
  std::string describe() const {
    std::ostringstream o;
    o << "seed " << seed << ": " << succeeded << "/" << jobs << " ok, lost " << lost
      << ", duplicated " << duplicated << ", corrupt " << corrupt << ", unfinished "
      << unfinished << ", failed " << failed << ", resampled " << resampled << ", fenced "
      << fenced << ", done twice per status " << reported_twice << ", GPU-s paid twice "
      << gpu_s_paid_twice << ", faults "
      << faults << " (kill -9 " << kills << ", stop " << stops << ", crash points fired "
      << crash_exits << ", backend crashes/hangs " << backend_faults << ", link cuts "
      << link_cuts << ", full disks " << full_disks << ")";
    for (auto& n : notes)
      o << "\n    " << n;
    return o.str();
  }
};

/// One fault, planned from the seed.
struct fault {
  enum kind_t { kill9, stop_cont, crash_points, backend_faults, link_cut, disk_full } kind;
  std::string host;
  double at_s;       ///< real seconds after the submit
  double length_s;   ///< down (kill9: before restart) or stopped (stop_cont)
};

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    out.push_back(l);
  return out;
}

/// Runs one seeded scenario end to end and checks it.
class scenario {
public:
  explicit scenario(uint64_t seed) : seed_(seed), rng_(seed) {}

  verdict run() {
    verdict v;
    v.seed = seed_;
    testing_support::temp_dir dir("vl-chaos");
    dir_ = dir.path();
    write_config();
    plan_faults(v);
    // Each host's data on a small disk of its own (when the machine lets us mount).
    std::map<std::string, std::unique_ptr<small_disk>> disks;
    for (auto& h : hosts_)
      disks[h] = std::make_unique<small_disk>(dir_ + "/" + h, "400m");
    link_cutter cutter("vidline_chaos_" + std::to_string(::getpid()) + "_" + std::to_string(seed_),
                       ports_);
    double restore_link_at = -1;
    std::map<std::string, double> empty_disk_at;
    for (auto& h : hosts_)
      start(h);
    auto cluster = vidline::config::load(config_);
    vidline::nodes::verbs::coordinator_client cl(cluster);
    msg_req_.request_id = "chaos-" + std::to_string(seed_);
    auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    std::string run_id;
    json st;
    std::size_t next_fault = 0;
    std::map<std::string, double> restart_at;
    std::map<std::string, double> cont_at;
    const double deadline_s = 90;
    bool done = false;
    while (elapsed() < deadline_s) {
      // Faults due now.
      while (next_fault < faults_.size() && faults_[next_fault].at_s <= elapsed()) {
        auto& f = faults_[next_fault++];
        auto& p = procs_[f.host];
        if (f.kind == fault::kill9 && p && p->running()) {
          ++v.kills;
          p->signal(SIGKILL);
          p->wait(10);
          restart_at[f.host] = elapsed() + f.length_s;
        } else if (f.kind == fault::stop_cont && p && p->running()) {
          ++v.stops;
          p->signal(SIGSTOP);
          cont_at[f.host] = elapsed() + f.length_s;
        } else if (f.kind == fault::link_cut && link_cutter::available() && cutter.cut()) {
          ++v.link_cuts;
          restore_link_at = elapsed() + 0.5 + 2 * f.length_s;  // past the heartbeat timeout
        } else if (f.kind == fault::disk_full && disks[f.host]->fill()) {
          ++v.full_disks;
          empty_disk_at[f.host] = elapsed() + f.length_s;
        }
      }
      if (restore_link_at >= 0 && restore_link_at <= elapsed()) {
        cutter.restore();
        restore_link_at = -1;
      }
      for (auto it = empty_disk_at.begin(); it != empty_disk_at.end();) {
        if (it->second <= elapsed()) {
          disks[it->first]->empty();
          it = empty_disk_at.erase(it);
        } else {
          ++it;
        }
      }
      for (auto it = cont_at.begin(); it != cont_at.end();) {
        if (it->second <= elapsed()) {
          if (procs_[it->first])
            procs_[it->first]->signal(SIGCONT);
          it = cont_at.erase(it);
        } else {
          ++it;
        }
      }
      // The service manager: a node that exited comes back (after its planned downtime).
      for (auto& h : hosts_) {
        auto& p = procs_[h];
        if (p && !p->running() && cont_at.count(h) == 0) {
          int code = p->wait(0);
          if (code == vidline::crash::exit_code && restart_at.count(h) == 0)
            ++v.crash_exits;
          if (code != vidline::crash::exit_code && code != 137)
            v.notes.push_back("node " + h + " exited with " + std::to_string(code) + ": "
                              + tail(p->err()));
          if (restart_at.count(h) == 0)
            restart_at[h] = elapsed();
        }
      }
      for (auto it = restart_at.begin(); it != restart_at.end();) {
        if (it->second <= elapsed()) {
          start(it->first);
          it = restart_at.erase(it);
        } else {
          ++it;
        }
      }
      // Submit (idempotent by request id) until accepted, then follow.
      try {
        if (run_id.empty()) {
          run_id = cl.submit(msg_req_, 1500);
        } else if (auto s = cl.status(run_id, 500)) {
          st = *s;
          if (st["state"] != "running" && next_fault >= faults_.size()) {
            done = true;
            break;
          }
        }
      } catch (const std::exception&) {
        // No coordinator right now (killed/stopped): keep injecting and restarting.
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // supervision pace
    }
    for (auto& [h, at] : cont_at)
      if (procs_[h])
        procs_[h]->signal(SIGCONT);
    cutter.restore();
    for (auto& [h, d] : disks)
      d->empty();
    if (done && !settle(cl, 20))
      v.notes.push_back("the line did not settle within 20 s of the faults' end");
    if (done) {
      try {
        if (auto later = cl.status(run_id, 2000))
          st = *later;  // what settling removed is counted in it
      } catch (const std::exception&) {
      }
    }
    for (auto& h : hosts_)
      if (procs_[h] && procs_[h]->running()) {
        procs_[h]->signal(SIGTERM);
        if (procs_[h]->wait(20) != 0)
          v.notes.push_back("node " + h + " did not stop cleanly: " + tail(procs_[h]->err()));
      }
    if (!done)
      v.unfinished = 1;
    check(v, run_id, st);
    if (!v.ok()) {
      // The data directories live on small disks unmounted on return: copy what explains
      // the failure (ledgers, node logs, journals) beside the config, which is kept.
      for (auto& h : hosts_) {
        std::error_code ec;
        std::filesystem::copy(dir_ + "/" + h, dir_ + "/" + h + ".kept",
                              std::filesystem::copy_options::recursive, ec);
        if (ec)
          v.notes.push_back("could not keep " + h + "'s data: " + ec.message());
      }
      v.notes.push_back("kept in " + dir_);
      dir.keep();
    }
    return v;
  }

private:
  /// After the run, with every fault healed, the line settles before anything is counted:
  /// a decoder cut off from the coordinator may have committed a video within its lease
  /// that the coordinator, once the lease expired, gave to another decoder; when the link
  /// is back, its report is answered with a discard and that video is removed
  /// (docs/reliability.md, "Leases"). Settled: every host up, and every decoder has
  /// reported since the heal with no result waiting for an ack and nothing held.
  bool settle(vidline::nodes::verbs::coordinator_client& cl, double deadline_s) {
    auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, std::pair<uint64_t, uint64_t>> at_heal;  // decoder: epoch, seq
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
           < deadline_s) {
      // The service manager goes on: a node still down after its fault (a kill whose
      // downtime outlasted the run, a crash point) comes back.
      for (auto& h : hosts_)
        if (!procs_[h] || !procs_[h]->running())
          start(h);
      try {
        if (auto c = cl.status("@cluster", 500)) {
          bool settled = true;
          for (auto& [host, up] : (*c)["hosts_up"].items())
            settled = settled && up.get<bool>();
          for (auto& [name, d] : (*c)["decoders"].items()) {
            std::pair<uint64_t, uint64_t> now{d.value("epoch", uint64_t{0}),
                                              d.value("seq", uint64_t{0})};
            auto [it, fresh] = at_heal.emplace(name, now);
            settled = settled && !fresh && now != it->second && d["alive"].get<bool>()
                      && d.value("unacked", 1u) == 0 && d.value("holding", 1u) == 0;
          }
          if (settled)
            return true;
        }
      } catch (const std::exception&) {
        // The coordinator's host may still be coming back.
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling pace
    }
    return false;
  }

  int pool_gpus(const std::string& pool) const {
    auto it = pool_gpus_.find(pool);
    return it == pool_gpus_.end() ? 1 : it->second;
  }

  static std::string tail(const std::string& s) {
    return s.size() > 600 ? s.substr(s.size() - 600) : s;
  }

  void write_config() {
    auto cfg = json::parse(testing_support::read_file(std::string(VIDLINE_SOURCE_DIR)
                                                      + "/config/examples/reference.json"));
    // Even seeds move latents on the bulk channel (digests on CURVE), odd seeds on CURVE;
    // link cuts cut every port.
    const std::size_t n = cfg["hosts"].size();
    const bool bulk = seed_ % 2 == 0;
    auto ports = testing_support::free_ports(static_cast<int>(bulk ? 2 * n : n));
    ports_ = ports;
    for (std::size_t i = 0; i < n; ++i) {
      cfg["hosts"][i]["port"] = ports[i];
      if (bulk)
        cfg["hosts"][i]["bulk_port"] = ports[n + i];
      cfg["hosts"][i]["data_dir"] = dir_ + "/" + cfg["hosts"][i]["name"].get<std::string>();
      hosts_.push_back(cfg["hosts"][i]["name"].get<std::string>());
    }
    testing_support::add_keys(cfg, dir_);
    cfg["backends"]["sim"]["time_scale"] = 0.004;
    // CHAOS_TIME_SCALE: another sim clock (real seconds per run-clock second), e.g. to
    // measure GPU time paid twice with the liveness and lease delays (real seconds) a
    // smaller share of a stage.
    if (const char* ts = std::getenv("CHAOS_TIME_SCALE"); ts != nullptr && *ts != '\0')
      cfg["backends"]["sim"]["time_scale"] = std::strtod(ts, nullptr);
    // A mode decoding on both hosts: a decode given up on can be done again elsewhere.
    cfg["modes"]["four_b_plus_two"] = {{"pools", {"four_a"}},
                                       {"decoders", {"rtx3080ti", "t10_a"}}};
    cfg["knobs"] = {{"heartbeat_interval_ms", 200}, {"heartbeat_misses", 3},
                    {"status_interval_ms", 100},    {"order_resend_ms", 400},
                    {"lease_ms", 1000},
                    {"reconnect_max_ms", 500},      {"transfer_timeout_ms", 1500},
                    {"max_attempts", 5},            {"sample_timeout_s", 600},
                    {"decode_timeout_s", 120},
                    // A hung sampler is given up after this without a step (the model's
                    // cold load and one step take about 125 run-clock s here).
                    {"stall_timeout_s", 180}};
    // CHAOS_CHECKPOINT_INTERVAL_S: the samplers' checkpoint interval (run-clock seconds;
    // unset: the knob's default), to measure the GPU time a fault costs with checkpoints.
    if (const char* ci = std::getenv("CHAOS_CHECKPOINT_INTERVAL_S"); ci != nullptr && *ci != '\0')
      cfg["knobs"]["checkpoint_interval_s"] = std::strtod(ci, nullptr);
    // CHAOS_SIM_STEPS: the sim samplers' steps (6 models a turbo sampler; unset: 30).
    if (const char* n = std::getenv("CHAOS_SIM_STEPS"); n != nullptr && *n != '\0')
      cfg["backends"]["sim"]["options"] = {{"steps", std::atoi(n)}};
    // CHAOS_STALL_TIMEOUT_S: the progress watchdog (0 = off: hangs last until the timeout).
    if (const char* st = std::getenv("CHAOS_STALL_TIMEOUT_S"); st != nullptr && *st != '\0')
      cfg["knobs"]["stall_timeout_s"] = std::atoi(st);
    for (auto& p : cfg["pools"])
      pool_gpus_[p["name"].get<std::string>()] = static_cast<int>(p["gpus"].size());
    static const char* modes[] = {"single_eight_plus_one", "four_four_plus_one",
                                  "four_four_xtx_plus_one", "eight_xtx_plus_one",
                                  "four_b_plus_two"};
    msg_req_.mode = modes[std::uniform_int_distribution<int>(0, 4)(rng_)];
    msg_req_.prompt = "chaos scenario prompt";
    msg_req_.width = 416;
    msg_req_.height = 736;
    msg_req_.seconds = 5;
    msg_req_.count = static_cast<uint32_t>(std::uniform_int_distribution<int>(3, 6)(rng_));
    msg_req_.seed = 987654321123ull + seed_ * 100;
    config_ = dir_ + "/cluster.json";
    std::ofstream(config_) << cfg.dump(2);
  }

  void plan_faults(verdict& v) {
    int n = std::uniform_int_distribution<int>(1, 3)(rng_);
    std::uniform_real_distribution<double> when(0.2, 2.0);
    for (int i = 0; i < n; ++i) {
      fault f;
      int k = std::uniform_int_distribution<int>(0, 5)(rng_);
      f.kind = static_cast<fault::kind_t>(k);
      f.host = hosts_[std::uniform_int_distribution<std::size_t>(0, hosts_.size() - 1)(rng_)];
      f.at_s = when(rng_);
      f.length_s = std::uniform_real_distribution<double>(0.0, 1.5)(rng_);
      // A pause long enough to outlast the liveness window and the leases.
      if (f.kind == fault::stop_cont)
        f.length_s = std::uniform_real_distribution<double>(1.0, 6.0)(rng_);
      if (f.kind == fault::crash_points)
        crash_hosts_.insert(f.host);
      else if (f.kind == fault::backend_faults)
        backend_fault_hosts_.insert(f.host);
      else
        faults_.push_back(f);
    }
    std::sort(faults_.begin(), faults_.end(),
              [](const fault& a, const fault& b) { return a.at_s < b.at_s; });
    v.faults = n;
  }

  /// The binary under test: VIDLINE_BINARY from the environment (a campaign run on a copy),
  /// else the one this test was built with.
  static std::string binary() {
    const char* b = std::getenv("VIDLINE_BINARY");
    return b != nullptr && *b != '\0' ? b : VIDLINE_BINARY;
  }

  void start(const std::string& host) {
    std::vector<std::string> args{binary(), "node", "--config", config_, "--host", host};
    // A host chosen for crash-point faults runs with points armed (at every start, as
    // a flaky machine would); the probability keeps progress possible.
    if (crash_hosts_.count(host)) {
      auto env_value = std::to_string(seed_ * 7919 + starts_[host]) + ":0.15:*";
      ::setenv("VIDLINE_CRASH", env_value.c_str(), 1);
    } else {
      ::unsetenv("VIDLINE_CRASH");
    }
    // A host chosen for backend faults has stages that hang (until the progress watchdog
    // or the stage timeout gives them up) or crash half-way.
    if (backend_fault_hosts_.count(host)) {
      auto env_value = std::to_string(seed_ * 104729 + starts_[host]) + ":0.1:0.15";
      ::setenv("VIDLINE_SIM_FAULTS", env_value.c_str(), 1);
    } else {
      ::unsetenv("VIDLINE_SIM_FAULTS");
    }
    procs_[host].reset();
    procs_[host] = std::make_unique<process>(
      args, dir_ + "/" + host + "." + std::to_string(starts_[host]++) + ".out");
    ::unsetenv("VIDLINE_CRASH");
    ::unsetenv("VIDLINE_SIM_FAULTS");
  }

  /// The invariants, from the files alone.
  void check(verdict& v, const std::string& run_id, const json& st) {
    v.jobs = static_cast<int>(msg_req_.count);
    for (auto& l : lines_of(testing_support::read_file(dir_ + "/host_a/logs/node.log")))
      if (l.find("queued again") != std::string::npos
          && (l.find("(injected fault)") != std::string::npos
              || l.find("exceeded the stage timeout") != std::string::npos
              || l.find("stalled: no step") != std::string::npos))
        ++v.backend_faults;
    std::map<std::string, int> decoded, sampled;
    for (auto& h : hosts_)
      for (auto& l : lines_of(testing_support::read_file(dir_ + "/" + h + "/ledger.log"))) {
        std::istringstream in(l);
        std::string what, run, idx;
        in >> what >> run >> idx;
        if (run != run_id)
          continue;
        if (what == "decoded")
          decoded[idx]++;
        else if (what == "removed-decoded")  // published, then removed: it lost the race
          decoded[idx]--;
        else if (what == "sampled")
          sampled[idx]++;
        else if (what.rfind("fenced-", 0) == 0)
          ++v.fenced;
      }
    // Every video file of the run on every host, by job.
    std::map<std::string, std::vector<std::string>> videos;
    for (auto& h : hosts_) {
      const std::filesystem::path runs = dir_ + "/" + h + "/outputs/" + run_id;
      std::error_code ec;
      if (run_id.empty() || !std::filesystem::exists(runs, ec))
        continue;
      for (auto& f : std::filesystem::directory_iterator(runs, ec)) {
        const auto name = f.path().filename().string();
        if (name.rfind("job-", 0) == 0)
          videos[name.substr(4, name.find('-', 4) - 4)].push_back(f.path().string());
      }
    }
    if (st.contains("summary") && st["summary"].contains("done_twice"))
      v.reported_twice = st["summary"]["done_twice"].get<int>();
    if (st.contains("summary") && st["summary"].contains("gpu_s_paid_twice"))
      v.gpu_s_paid_twice = st["summary"]["gpu_s_paid_twice"].get<double>();
    if (st.contains("jobs"))
      for (auto& j : st["jobs"]) {
        int lost = 0, gpus = 0;
        if (j.contains("failed_attempts"))
          for (auto& f : j["failed_attempts"])
            if (f.value("stage", "") == "sampling") {
              ++lost;
              gpus += pool_gpus(f.value("lane", ""));
            }
        v.sampling_lost += lost;
        if (lost > 0 && gpus > 0 && j.contains("gpu_s_paid_twice"))
          v.paid_per_lost_attempt_s.push_back(j["gpu_s_paid_twice"].get<double>() / gpus);
      }
    std::map<int, std::string> reported;
    if (st.contains("jobs"))
      for (auto& j : st["jobs"])
        reported[j["index"].get<int>()] = j["state"].get<std::string>();
    uint32_t w = msg_req_.width, h = msg_req_.height, s = msg_req_.seconds;
    auto bytes = contract::reference_latent_bytes(w, h, s);
    for (uint32_t i = 0; i < msg_req_.count; ++i) {
      uint64_t seed = msg_req_.seed + i;
      auto key = std::to_string(i);
      const auto& files = videos[key];
      const std::string path = files.empty() ? "" : files.front();
      bool exists = !files.empty();
      if (exists) {
        contract::shot_ident id;  // a uniform batch: the sim backend's default workflow
        id.prompt = msg_req_.prompt;
        id.model = "sim";
        auto expect = contract::video_file(
          contract::latent_sha256(seed, w, h, s, bytes, contract::ident(id)), seed,
                                           w, h, s);
        if (testing_support::read_file(path) != expect) {
          ++v.corrupt;
          v.notes.push_back("job " + std::to_string(i) + ": " + path + " breaks the contract");
        } else {
          ++v.succeeded;
        }
      } else if (reported[static_cast<int>(i)] == "failed") {
        ++v.failed;
        v.notes.push_back("job " + std::to_string(i) + " reported failed");
      } else if (!v.unfinished) {
        ++v.lost;
        v.notes.push_back("job " + std::to_string(i) + ": no video, reported "
                          + reported[static_cast<int>(i)]);
      }
      if (exists && reported[static_cast<int>(i)] != "succeeded" && !v.unfinished)
        v.notes.push_back("job " + std::to_string(i) + " has its video but is reported "
                          + reported[static_cast<int>(i)]);
      if (decoded[key] > 1 || files.size() > 1) {
        ++v.duplicated;
        v.notes.push_back("job " + key + " decoded " + std::to_string(decoded[key])
                          + " times, " + std::to_string(files.size()) + " video files");
      }
      if (sampled[key] > 1)
        v.resampled += sampled[key] - 1;
    }
  }

  uint64_t seed_;
  std::mt19937_64 rng_;
  std::string dir_;
  std::string config_;
  std::vector<std::string> hosts_;
  std::vector<fault> faults_;
  std::set<std::string> crash_hosts_;
  std::set<std::string> backend_fault_hosts_;
  std::vector<int> ports_;
  std::map<std::string, int> pool_gpus_;  ///< GPUs per pool of the config
  std::map<std::string, std::unique_ptr<process>> procs_;
  std::map<std::string, int> starts_;
  vidline::msg::submit_run msg_req_;
};

} // namespace chaos
