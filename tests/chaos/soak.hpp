#pragma once
// The soak (docs/reliability.md, "The soak"): a time-compressed line standing for
// days of production. Real node processes on loopback (the chaos harness's cluster: the
// reference example with keys and bulk channels, each host's data on a small disk of its
// own), the sim backend on a fast clock, runs of mixed sizes submitted over simulated time,
// and the chaos harness's faults every few simulated minutes: kill -9 of any node (the
// coordinator's included), SIGSTOP/SIGCONT, a cut of every link, a data disk filled to the
// last byte. The soak plays the consumer: once a run has ended and every job of it is
// verified against the sim contract, its videos are taken away (deleted), as a farm's
// users collect what they ordered. It samples every node's resident set, open file
// descriptors, threads, and data directory (latents, journal, logs, the rest) at fixed
// simulated intervals and writes the record (CSV and JSON).
//
// The rule, for every host and resource: the maximum over the last third of the
// simulated time may exceed the maximum over the first two thirds by at most
// max(10% of that maximum, the resource's slack) (`soak_rule`). A resource that grows
// without bound gains about half its level in the last third and fails; one that levels
// off does not. Maxima, not means, so a node restarted by a fault (its memory back to a
// fresh process's) does not hide growth. Every job must end verified: its video as the
// contract says, decoded once (the hosts' ledgers), none lost, none failed.

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nodes/verbs/exit_codes.hpp"
#include "tests/chaos/harness.hpp"

namespace chaos {

/// What the soak is asked to do (launch/soak; SOAK_* in the environment).
struct soak_params {
  double hours = 72;             ///< simulated hours of production
  double time_scale = 0.01;      ///< real seconds per simulated second (the sim clock)
  uint64_t seed = 1;
  double jobs_per_hour = 55;     ///< the mean load, in simulated hours
  double fault_min_minutes = 4;  ///< a fault every U(min, max) simulated minutes
  double fault_max_minutes = 12;
  double sample_minutes = 10;    ///< a sample of every node every this many simulated minutes
  std::string record_dir;        ///< where soak.csv and soak.json go ("" = the temp dir)
};

/// One resource's slack in `soak_rule`, and its unit.
struct soak_resource {
  const char* name;
  double slack;
  const char* unit;
};

inline const std::vector<soak_resource>& soak_resources() {
  static const std::vector<soak_resource> r = {
      {"rss_kib", 16 * 1024, "KiB"},              // a process's resident set
      {"fds", 16, "fds"},                         // open file descriptors
      {"threads", 8, "threads"},
      {"latents_bytes", 256.0 * (1 << 20), "B"},  // latents in flight come and go
      {"journal_bytes", 1 << 20, "B"},
      {"logs_bytes", 1 << 20, "B"},
      {"other_data_bytes", 16 << 20, "B"},        // the rest of the data dir (outputs
                                                  // not yet collected, receipts, ledger,
                                                  // conditioning, .part files)
  };
  return r;
}

/// The verdict of the rule for one series.
struct soak_trend {
  std::string host, resource;
  double early_max = 0, late_max = 0, bound = 0;
  bool ok = true;
};

/// The rule: the last third's maximum at most the first two thirds' maximum plus
/// max(10% of it, slack). `at` and `v` are the samples' simulated hours and values.
inline soak_trend soak_rule(const std::vector<double>& at, const std::vector<double>& v,
                            double hours, double slack) {
  soak_trend t;
  bool early_seen = false, late_seen = false;
  for (std::size_t i = 0; i < at.size() && i < v.size(); ++i) {
    if (at[i] < hours * 2 / 3) {
      t.early_max = early_seen ? std::max(t.early_max, v[i]) : v[i];
      early_seen = true;
    } else {
      t.late_max = late_seen ? std::max(t.late_max, v[i]) : v[i];
      late_seen = true;
    }
  }
  t.bound = t.early_max + std::max(0.1 * t.early_max, slack);
  t.ok = early_seen && late_seen && t.late_max <= t.bound;
  return t;
}

/// What the soak found.
struct soak_verdict {
  double sim_hours = 0, real_s = 0;
  double gpu_s_paid_twice = 0;  ///< sampling GPU-seconds redone, as the runs' statuses say
  int runs = 0, jobs = 0, verified = 0, failed = 0, lost = 0, corrupt = 0, duplicated = 0,
      unfinished_runs = 0, unread_runs = 0, done_twice = 0, kills = 0, stops = 0,
      link_cuts = 0, full_disks = 0, samples = 0;
  /// The harness's own longest turn (real seconds): a machine that stalls the soak for
  /// longer than the journal keeps a finished run makes that run unreadable.
  double longest_turn_s = 0;
  std::vector<soak_trend> trends;
  std::vector<std::string> notes;
  bool jobs_ok() const {
    return jobs > 0 && verified == jobs && failed == 0 && lost == 0 && corrupt == 0 &&
           duplicated == 0 && unfinished_runs == 0 && unread_runs == 0;
  }
  std::vector<std::string> growing() const {
    std::vector<std::string> out;
    for (auto& t : trends)
      if (!t.ok)
        out.push_back(t.host + "/" + t.resource);
    return out;
  }
};

/// Bytes of the regular files under `dir` (0 when it does not exist).
inline uint64_t bytes_under(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  uint64_t n = 0;
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return 0;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied,
                                           ec),
       end;
       it != end; it.increment(ec)) {
    if (ec)
      break;
    if (it->path().filename() == ".filler")
      continue;  // the full-disk fault's own file, not the line's
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      n += static_cast<uint64_t>(st.st_blocks) * 512;  // what the disk holds
  }
  return n;
}

/// One process's resident set (KiB) and threads from /proc/PID/status, and its open
/// file descriptors; false when it is gone.
inline bool proc_sample(pid_t pid, double& rss_kib, double& threads, double& fds) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in)
    return false;
  std::string line;
  rss_kib = threads = -1;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0)
      rss_kib = std::stod(line.substr(6));
    else if (line.rfind("Threads:", 0) == 0)
      threads = std::stod(line.substr(8));
  }
  std::error_code ec;
  fds = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end;
       !ec && it != end; it.increment(ec))
    ++fds;
  return rss_kib >= 0 && threads >= 0 && !ec;
}

/// A planned run.
struct soak_run {
  double at_h = 0;  ///< simulated hour of its submit
  vidline::msg::submit_run req;
  std::string run_id;
  bool ended = false, checked = false;
};

class soak {
public:
  explicit soak(soak_params p) : p_(std::move(p)), rng_(p_.seed) {}

  soak_verdict run() {
    soak_verdict v;
    testing_support::temp_dir dir("vl-soak");
    dir_ = dir.path();
    if (p_.record_dir.empty())
      p_.record_dir = dir_;
    std::filesystem::create_directories(p_.record_dir);
    write_config();
    plan(v);
    std::map<std::string, std::unique_ptr<small_disk>> disks;
    for (auto& h : hosts_)
      disks[h] = std::make_unique<small_disk>(dir_ + "/" + h, "1g");
    link_cutter cutter("vidline_soak_" + std::to_string(::getpid()), ports_);
    for (auto& h : hosts_)
      start(h);
    auto cluster = vidline::config::load(config_);
    vidline::nodes::verbs::coordinator_client cl(cluster);
    std::ofstream csv(p_.record_dir + "/soak.csv");
    csv << "sim_h,real_s,host,pid,rss_kib,fds,threads,latents_bytes,journal_bytes,logs_bytes,"
           "other_data_bytes\n";

    const auto t0 = std::chrono::steady_clock::now();
    auto real = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    auto sim_h = [&] { return real() / p_.time_scale / 3600; };
    std::size_t next_run = 0, next_fault = 0;
    double next_sample_h = 0;
    std::map<std::string, double> restart_at, cont_at, empty_at;
    double restore_link_at = -1;
    std::size_t poll_cursor = 0;
    // After the last simulated hour: faults end, the line drains (a bounded real time).
    const double drain_real_s = 120 + 0.5 * p_.hours * 3600 * p_.time_scale;
    double ended_at_real = -1;
    double turn_began = real();
    while (true) {
      v.longest_turn_s = std::max(v.longest_turn_s, real() - turn_began);
      turn_began = real();
      const double now_h = sim_h();
      const bool faulting = now_h < p_.hours;
      // Faults due now (the chaos harness's kinds, with its real-time lengths).
      while (faulting && next_fault < faults_.size() && faults_[next_fault].at_s <= now_h) {
        auto& f = faults_[next_fault++];
        auto& proc = procs_[f.host];
        if (f.kind == fault::kill9 && proc && proc->running() && cont_at.count(f.host) == 0) {
          ++v.kills;
          proc->signal(SIGKILL);
          proc->wait(10);
          restart_at[f.host] = real() + f.length_s;
        } else if (f.kind == fault::stop_cont && proc && proc->running() &&
                   cont_at.count(f.host) == 0) {
          ++v.stops;
          proc->signal(SIGSTOP);
          cont_at[f.host] = real() + f.length_s;
        } else if (f.kind == fault::link_cut && link_cutter::available() &&
                   restore_link_at < 0 && cutter.cut()) {
          ++v.link_cuts;
          restore_link_at = real() + 0.5 + 2 * f.length_s;
        } else if (f.kind == fault::disk_full && empty_at.count(f.host) == 0 &&
                   disks[f.host]->fill()) {
          ++v.full_disks;
          empty_at[f.host] = real() + f.length_s;
        }
      }
      heal(cutter, disks, restore_link_at, cont_at, empty_at, restart_at, real(), false);
      service_manager(restart_at, cont_at, real(), v);
      // Submits due now (idempotent by request id: retried until accepted).
      while (next_run < runs_.size() && runs_[next_run].at_h <= now_h) {
        auto& r = runs_[next_run];
        try {
          r.run_id = cl.submit(r.req, 1500);
          ++next_run;
        } catch (const std::exception&) {
          break;  // no coordinator right now: next turn
        }
      }
      // Follow the runs: a few status queries per turn, oldest unchecked first.
      follow(cl, v, next_run, poll_cursor);
      // Samples.
      if (now_h >= next_sample_h) {
        sample(csv, now_h, real(), v);
        next_sample_h += p_.sample_minutes / 60;
      }
      const bool all_checked =
          next_run == runs_.size() &&
          std::all_of(runs_.begin(), runs_.end(), [](const soak_run& r) { return r.checked; });
      if (!faulting && ended_at_real < 0)
        ended_at_real = real();
      if (!faulting && (all_checked || real() - ended_at_real > drain_real_s))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // supervision pace
    }
    heal(cutter, disks, restore_link_at, cont_at, empty_at, restart_at, real(), true);
    for (auto& h : hosts_)
      if (!procs_[h] || !procs_[h]->running())
        start(h);
    sample(csv, sim_h(), real(), v);  // the last sample: everything drained
    v.sim_hours = sim_h();
    v.real_s = real();
    for (auto& h : hosts_)
      if (procs_[h] && procs_[h]->running()) {
        procs_[h]->signal(SIGTERM);
        if (procs_[h]->wait(30) != 0)
          v.notes.push_back("node " + h + " did not stop cleanly");
      }
    final_checks(v);
    judge(v);
    write_record(v);
    if (!v.jobs_ok()) {
      for (auto& h : hosts_) {
        std::error_code ec;
        std::filesystem::copy(dir_ + "/" + h, dir_ + "/" + h + ".kept",
                              std::filesystem::copy_options::recursive, ec);
      }
      v.notes.push_back("kept in " + dir_);
      dir.keep();
    }
    return v;
  }

  const soak_params& params() const { return p_; }

private:
  void write_config() {
    auto cfg = json::parse(testing_support::read_file(std::string(VIDLINE_SOURCE_DIR) +
                                                      "/config/examples/reference.json"));
    const std::size_t n = cfg["hosts"].size();
    auto ports = testing_support::free_ports(static_cast<int>(2 * n));
    ports_ = ports;
    for (std::size_t i = 0; i < n; ++i) {
      cfg["hosts"][i]["port"] = ports[i];
      cfg["hosts"][i]["bulk_port"] = ports[n + i];
      cfg["hosts"][i]["data_dir"] = dir_ + "/" + cfg["hosts"][i]["name"].get<std::string>();
      hosts_.push_back(cfg["hosts"][i]["name"].get<std::string>());
    }
    testing_support::add_keys(cfg, dir_);
    cfg["backends"]["sim"]["time_scale"] = p_.time_scale;
    cfg["modes"]["four_b_plus_two"] = {{"pools", {"four_a"}},
                                       {"decoders", {"rtx3080ti", "t10_a"}}};
    // The chaos campaign's knobs (real-time liveness and leases), timeouts in run-clock
    // seconds as long as the chaos campaign's.
    cfg["knobs"] = {{"heartbeat_interval_ms", 200}, {"heartbeat_misses", 3},
                    {"status_interval_ms", 100},    {"order_resend_ms", 400},
                    {"lease_ms", 1000},             {"reconnect_max_ms", 500},
                    {"transfer_timeout_ms", 1500},  {"max_attempts", 8},
                    {"sample_timeout_s", 1200},     {"decode_timeout_s", 240},
                    // Retention in real seconds, scaled as the sim clock is: at time_scale
                    // 0.01 a finished run leaves the coordinator's memory after ~17
                    // simulated minutes and the journal after a sixth of the soak's real
                    // length, kept within 30-120 s (~50 simulated minutes to ~3.3 hours),
                    // so the journal levels off within the first third of even the short
                    // soak. The soak's follow verifies a run from its status within seconds
                    // of its end, from the journal once it was forgotten; the journal's
                    // window is what a stalled machine may hold the soak up for (a loaded
                    // 2-core machine held one 72-hour soak up for 78 s).
                    {"finished_run_memory_s", 10},
                    {"journal_keep_finished_s",
                     static_cast<int>(std::clamp(p_.hours * 3600 * p_.time_scale / 6, 30.0, 120.0))},
                    // What every host sheds (actors/latents/sweep.hpp), as scaled: part
                    // files and video links (the consumer takes the videos away) after ~50
                    // simulated minutes, conditioning and receipts after ~100.
                    {"stale_part_s", 30},           {"output_blob_retention_s", 30},
                    {"conditioning_retention_s", 60}, {"receipt_retention_s", 60}};
    config_ = dir_ + "/cluster.json";
    std::ofstream(config_) << cfg.dump(2);
  }

  /// Runs over simulated time (Poisson arrivals, sizes and counts mixed) and faults.
  void plan(soak_verdict& v) {
    static const char* modes[] = {"single_eight_plus_one", "four_four_plus_one",
                                  "four_four_xtx_plus_one", "eight_xtx_plus_one",
                                  "four_b_plus_two"};
    struct sz {
      uint32_t w, h, s;
    };
    static const sz sizes[] = {{416, 736, 5}, {320, 576, 4}, {256, 448, 3}, {416, 736, 3}};
    std::uniform_real_distribution<double> u(0, 1);
    // Counts: most runs small, some medium, a few large (mean about 18 jobs).
    auto count = [&] {
      const double x = u(rng_);
      if (x < 0.6)
        return std::uniform_int_distribution<int>(1, 8)(rng_);
      if (x < 0.9)
        return std::uniform_int_distribution<int>(9, 40)(rng_);
      return std::uniform_int_distribution<int>(41, 120)(rng_);
    };
    const double mean_jobs = 0.6 * 4.5 + 0.3 * 24.5 + 0.1 * 80.5;
    std::exponential_distribution<double> gap(p_.jobs_per_hour / mean_jobs);
    // Arrivals over the whole time, so the last third is loaded like the rest (a quiet
    // tail would hide growth per job); the drain after it is sampled too.
    for (double at = 0.02; at < p_.hours; at += gap(rng_)) {
      soak_run r;
      r.at_h = at;
      r.req.mode = modes[std::uniform_int_distribution<int>(0, 4)(rng_)];
      const sz& s = sizes[std::uniform_int_distribution<int>(0, 3)(rng_)];
      r.req.width = s.w;
      r.req.height = s.h;
      r.req.seconds = s.s;
      r.req.count = static_cast<uint32_t>(count());
      r.req.prompt = "soak prompt " + std::to_string(runs_.size() % 7);
      r.req.seed = 1000003ull * (p_.seed * 1000 + runs_.size());
      r.req.request_id = "soak-" + std::to_string(p_.seed) + "-" + std::to_string(runs_.size());
      v.jobs += static_cast<int>(r.req.count);
      runs_.push_back(r);
    }
    v.runs = static_cast<int>(runs_.size());
    // Faults: at_s holds the simulated hour; lengths are real seconds (the chaos harness's).
    std::uniform_real_distribution<double> every(p_.fault_min_minutes / 60,
                                                 p_.fault_max_minutes / 60);
    for (double at = every(rng_); at < p_.hours; at += every(rng_)) {
      fault f;
      static const fault::kind_t kinds[] = {fault::kill9, fault::stop_cont, fault::link_cut,
                                            fault::disk_full};
      f.kind = kinds[std::uniform_int_distribution<int>(0, 3)(rng_)];
      f.host = hosts_[std::uniform_int_distribution<std::size_t>(0, hosts_.size() - 1)(rng_)];
      f.at_s = at;
      f.length_s = std::uniform_real_distribution<double>(0.0, 1.5)(rng_);
      if (f.kind == fault::stop_cont)
        f.length_s = std::uniform_real_distribution<double>(1.0, 6.0)(rng_);
      faults_.push_back(f);
    }
  }

  static std::string binary() {
    const char* b = std::getenv("VIDLINE_BINARY");
    return b != nullptr && *b != '\0' ? b : VIDLINE_BINARY;
  }

  void start(const std::string& host) {
    procs_[host].reset();
    // One output file per host (appended by restarts would need O_APPEND: the process
    // helper truncates, so each start has its own, removed when the next starts).
    const std::string out = dir_ + "/" + host + ".out";
    std::error_code ec;
    // What a node wrote to stderr before it ended (an abort's message, a sanitizer's
    // report) is kept for the post-mortem: nodes log to their log file, so it is rare.
    if (std::filesystem::file_size(out + ".err", ec) > 0 && !ec)
      std::filesystem::rename(out + ".err",
                              dir_ + "/" + host + ".start-" + std::to_string(++kept_errs_) + ".err", ec);
    std::filesystem::remove(out, ec);
    std::filesystem::remove(out + ".err", ec);
    procs_[host] = std::make_unique<process>(
        std::vector<std::string>{binary(), "node", "--config", config_, "--host", host}, out);
  }

  void heal(link_cutter& cutter, std::map<std::string, std::unique_ptr<small_disk>>& disks,
            double& restore_link_at, std::map<std::string, double>& cont_at,
            std::map<std::string, double>& empty_at, std::map<std::string, double>& restart_at,
            double now, bool all) {
    if (restore_link_at >= 0 && (all || restore_link_at <= now)) {
      cutter.restore();
      restore_link_at = -1;
    }
    for (auto it = empty_at.begin(); it != empty_at.end();)
      if (all || it->second <= now) {
        disks[it->first]->empty();
        it = empty_at.erase(it);
      } else {
        ++it;
      }
    for (auto it = cont_at.begin(); it != cont_at.end();)
      if (all || it->second <= now) {
        if (procs_[it->first])
          procs_[it->first]->signal(SIGCONT);
        it = cont_at.erase(it);
      } else {
        ++it;
      }
    if (all)
      for (auto& [h, at] : restart_at)
        at = now;
  }

  void service_manager(std::map<std::string, double>& restart_at,
                       std::map<std::string, double>& cont_at, double now, soak_verdict& v) {
    for (auto& h : hosts_) {
      auto& proc = procs_[h];
      if (proc && !proc->running() && cont_at.count(h) == 0 && restart_at.count(h) == 0) {
        const int code = proc->wait(0);
        if (code != 137 && v.notes.size() < 50)
          v.notes.push_back("node " + h + " exited with " + std::to_string(code));
        restart_at[h] = now;
      }
    }
    for (auto it = restart_at.begin(); it != restart_at.end();)
      if (it->second <= now) {
        start(it->first);
        it = restart_at.erase(it);
      } else {
        ++it;
      }
  }

  /// Asks after up to 3 submitted runs not yet checked (in turn, the checked ones
  /// skipped); a run that has ended is verified and its videos collected. A run the
  /// coordinator no longer knows ended and left the journal before the soak read it: it
  /// cannot be verified, and says so.
  void follow(vidline::nodes::verbs::coordinator_client& cl, soak_verdict& v, std::size_t submitted,
              std::size_t& cursor) {
    int asked = 0;
    for (std::size_t looked = 0; looked < submitted && asked < 3; ++looked) {
      auto& r = runs_[cursor++ % submitted];
      if (r.checked)
        continue;
      ++asked;
      try {
        auto st = cl.status(r.run_id, 500);
        if (!st || (*st)["state"] == "running")
          continue;
        verify(r, *st, v);
      } catch (const vidline::nodes::verbs::coordinator_error& e) {
        if (e.exit_code() != vidline::nodes::verbs::exit_code::no_such_run)
          return;  // no coordinator right now
        r.checked = true;
        ++v.unread_runs;
        if (v.notes.size() < 50)
          v.notes.push_back("run " + r.run_id + " left the journal before the soak read it ("
                            + e.what() + "); the soak's longest turn so far "
                            + std::to_string(v.longest_turn_s) + " s");
      } catch (const std::exception&) {
        return;  // no coordinator right now
      }
    }
  }

  void verify(soak_run& r, const json& st, soak_verdict& v) {
    r.checked = true;
    if (st.contains("summary") && st["summary"].contains("done_twice"))
      v.done_twice += st["summary"]["done_twice"].get<int>();
    if (st.contains("summary") && st["summary"].contains("gpu_s_paid_twice"))
      v.gpu_s_paid_twice += st["summary"]["gpu_s_paid_twice"].get<double>();
    std::set<int> seen;
    if (st.contains("jobs"))
      for (auto& j : st["jobs"]) {
        const int idx = j["index"].get<int>();
        seen.insert(idx);
        if (j["state"] == "failed") {
          ++v.failed;
          if (v.notes.size() < 50)
            v.notes.push_back("run " + r.run_id + " job " + std::to_string(idx) + " failed: " +
                              j.value("error", json()).dump());
          continue;
        }
        if (j["state"] != "succeeded") {
          ++v.lost;  // the run ended, the job neither done nor failed
          if (v.notes.size() < 50)
            v.notes.push_back("run " + r.run_id + " job " + std::to_string(idx) + " ended " +
                              j["state"].dump());
          continue;
        }
        const std::string problem = testing_support::contract_problem(j);
        if (problem.empty()) {
          ++v.verified;
        } else {
          ++v.corrupt;
          if (v.notes.size() < 50)
            v.notes.push_back("run " + r.run_id + " job " + std::to_string(idx) + ": " + problem);
        }
      }
    v.lost += static_cast<int>(r.req.count) - static_cast<int>(seen.size());
    // The consumer takes the videos away.
    for (auto& h : hosts_) {
      std::error_code ec;
      std::filesystem::remove_all(dir_ + "/" + h + "/outputs/" + r.run_id, ec);
    }
  }

  void sample(std::ofstream& csv, double now_h, double real_s, soak_verdict& v) {
    namespace fs = std::filesystem;
    for (auto& h : hosts_) {
      auto& proc = procs_[h];
      double rss = -1, threads = -1, fds = -1;
      if (!proc || !proc->running() || !proc_sample(proc->pid(), rss, threads, fds))
        continue;  // down (a fault): no sample of it this time
      const fs::path d = dir_ + "/" + h;
      const double latents = static_cast<double>(bytes_under(d / "latents"));
      const double journal = static_cast<double>(bytes_under(d / "journal"));
      const double logs = static_cast<double>(bytes_under(d / "logs"));
      const double other = static_cast<double>(bytes_under(d)) - latents - journal - logs;
      samples_[h].push_back({now_h, rss, fds, threads, latents, journal, logs, other});
      csv << now_h << "," << real_s << "," << h << "," << proc->pid() << "," << rss << ","
          << fds << "," << threads << "," << latents << "," << journal << "," << logs << ","
          << other << "\n";
      ++v.samples;
    }
    csv.flush();
  }

  /// Decoded once: the ledgers of every host, all runs.
  void final_checks(soak_verdict& v) {
    std::map<std::string, int> decoded;  // "run idx"
    for (auto& h : hosts_)
      for (auto& l : lines_of(testing_support::read_file(dir_ + "/" + h + "/ledger.log"))) {
        std::istringstream in(l);
        std::string what, run, idx;
        in >> what >> run >> idx;
        if (what == "decoded")
          decoded[run + " " + idx]++;
        else if (what == "removed-decoded")
          decoded[run + " " + idx]--;
      }
    for (auto& [key, n] : decoded)
      if (n > 1) {
        ++v.duplicated;
        if (v.notes.size() < 50)
          v.notes.push_back("job " + key + " decoded " + std::to_string(n) + " times");
      }
    for (auto& r : runs_)
      if (!r.checked) {
        ++v.unfinished_runs;  // not counted lost: it may still be going
        if (v.notes.size() < 50)
          v.notes.push_back("run " + (r.run_id.empty() ? r.req.request_id : r.run_id) +
                            " did not end in time");
      }
  }

  void judge(soak_verdict& v) {
    const auto& res = soak_resources();
    for (auto& [h, rows] : samples_) {
      std::vector<double> at;
      for (auto& row : rows)
        at.push_back(row[0]);
      for (std::size_t k = 0; k < res.size(); ++k) {
        std::vector<double> vals;
        for (auto& row : rows)
          vals.push_back(row[k + 1]);
        soak_trend t = soak_rule(at, vals, v.sim_hours, res[k].slack);
        t.host = h;
        t.resource = res[k].name;
        v.trends.push_back(t);
      }
    }
  }

  void write_record(const soak_verdict& v) {
    json j;
    j["params"] = {{"hours", p_.hours},
                   {"time_scale", p_.time_scale},
                   {"seed", p_.seed},
                   {"jobs_per_hour", p_.jobs_per_hour},
                   {"fault_every_minutes", {p_.fault_min_minutes, p_.fault_max_minutes}},
                   {"sample_minutes", p_.sample_minutes}};
    j["rule"] = "per host and resource: max over the last third of the simulated time <= "
                "max over the first two thirds + max(10% of it, the resource's slack)";
    j["sim_hours"] = v.sim_hours;
    j["real_s"] = v.real_s;
    j["jobs"] = {{"runs", v.runs},         {"jobs", v.jobs},
                 {"verified", v.verified}, {"failed", v.failed},
                 {"lost", v.lost},         {"corrupt", v.corrupt},
                 {"duplicated", v.duplicated}, {"unfinished_runs", v.unfinished_runs},
                 {"unread_runs", v.unread_runs},
                 {"done_twice_per_status", v.done_twice},
                 {"gpu_s_paid_twice", v.gpu_s_paid_twice}};
    j["faults"] = {{"kill9", v.kills}, {"sigstop", v.stops}, {"link_cuts", v.link_cuts},
                   {"full_disks", v.full_disks}};
    j["samples"] = v.samples;
    j["longest_turn_s"] = v.longest_turn_s;
    for (auto& t : v.trends) {
      double slack = 0;
      for (auto& r : soak_resources())
        if (t.resource == r.name)
          slack = r.slack;
      j["resources"].push_back({{"host", t.host}, {"resource", t.resource},
                                {"early_max", t.early_max}, {"late_max", t.late_max},
                                {"bound", t.bound}, {"slack", slack}, {"ok", t.ok}});
    }
    j["notes"] = v.notes;
    std::ofstream(p_.record_dir + "/soak.json") << j.dump(2) << "\n";
  }

  soak_params p_;
  std::mt19937_64 rng_;
  std::string dir_, config_;
  std::vector<std::string> hosts_;
  std::vector<int> ports_;
  std::vector<soak_run> runs_;
  std::vector<fault> faults_;
  std::map<std::string, std::unique_ptr<process>> procs_;
  int kept_errs_ = 0;  ///< stderr files kept from ended starts (start())
  /// Per host: rows of {sim hour, then the resources in soak_resources() order}.
  std::map<std::string, std::vector<std::array<double, 8>>> samples_;
};

} // namespace chaos
