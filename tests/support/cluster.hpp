#pragma once
// A local cluster for integration tests: the reference example rewritten with free loopback
// ports and data under a temporary directory, node processes, and the contract check of a
// finished job.

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/bus/keys.hpp"
#include "tests/support/contract.hpp"
#include "tests/support/processes.hpp"

namespace testing_support {

using nlohmann::json;

/// Gives every host of `cfg` a fresh CURVE key pair under <dir>/keys and turns plaintext
/// off, so the test runs its links as a real line does (CURVE, listed keys only).
inline void add_keys(json& cfg, const std::string& dir) {
  cfg.erase("plaintext");
  for (auto& h : cfg["hosts"]) {
    const auto name = h["name"].get<std::string>();
    const auto keys = vidline::nodes::bus::write_curve_keypair(dir + "/keys", name, true);
    h["public_key"] = keys.public_z85;
    h["secret_key_file"] = keys.secret_path;
  }
}

/// The reference example with free loopback ports, data under `dir`, fresh keys
/// (add_keys), each host a bulk channel unless `bulk` is false (latents unencrypted, digests
/// on CURVE, as a fast line runs), the given clock and knob overrides. Returns the config
/// file's path.
inline std::string write_reference_config(const std::string& dir, double time_scale,
                                          const json& knobs = json::object(), bool bulk = true) {
  auto cfg = json::parse(read_file(std::string(VIDLINE_SOURCE_DIR)
                                   + "/config/examples/reference.json"));
  const auto n = cfg["hosts"].size();
  auto ports = free_ports(static_cast<int>(2 * n));
  for (std::size_t i = 0; i < n; ++i) {
    cfg["hosts"][i]["port"] = ports[i];
    if (bulk)
      cfg["hosts"][i]["bulk_port"] = ports[n + i];
    cfg["hosts"][i]["data_dir"] = dir + "/" + cfg["hosts"][i]["name"].get<std::string>();
  }
  add_keys(cfg, dir);
  cfg["backends"]["sim"]["time_scale"] = time_scale;
  if (!knobs.empty())
    cfg["knobs"] = knobs;
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

/// Starts `vidline node` for `host`; its output goes to <dir>/<host>.<n>.out.
inline std::unique_ptr<process> start_node(const std::string& dir, const std::string& config,
                                           const std::string& host) {
  static std::map<std::string, int> starts;
  auto n = starts[dir + host]++;
  return std::make_unique<process>(
    std::vector<std::string>{VIDLINE_BINARY, "node", "--config", config, "--host", host},
    dir + "/" + host + "." + std::to_string(n) + ".out");
}

/// `vidline run --jobs LIST --background` in `mode`, as a user submits a shot list; the
/// run id it prints (the test fails when it exits non-zero or prints none).
inline std::string submit_shot_list(const std::string& dir, const std::string& config,
                                    const std::string& mode, const std::string& list) {
  process submit({VIDLINE_BINARY, "run", "--config", config, "--mode", mode, "--jobs", list,
                  "--background"},
                 dir + "/submit.out");
  REQUIRE(submit.wait(60) == 0);
  std::string run_id = submit.out();
  run_id.erase(run_id.find_last_not_of(" \n") + 1);
  REQUIRE_FALSE(run_id.empty());
  return run_id;
}

/// Waits until the coordinator answers (an error reply is an answer).
inline bool coordinator_answers(vidline::nodes::verbs::coordinator_client& cl, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      if (cl.status("", 500))
        return true;
    } catch (const std::exception&) {
      return true;
    }
  }
  return false;
}

/// Waits until every pool and decoder in the coordinator's view (`@cluster`) has reported
/// alive: a plan starts with all of them known; a live batch that came first would wait.
inline bool line_reported(vidline::nodes::verbs::coordinator_client& cl, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      if (auto c = cl.status("@cluster", 500)) {
        bool all = !(*c)["pools"].empty();
        for (auto& [name, p] : (*c)["pools"].items())
          all = all && p["alive"].get<bool>();
        for (auto& [name, d] : (*c)["decoders"].items())
          all = all && d["alive"].get<bool>();
        if (all)
          return true;
      }
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling pace
  }
  return false;
}

/// Polls a run's status until `done(status)` holds or `seconds` pass; the last status seen.
template <class Pred>
json wait_status(vidline::nodes::verbs::coordinator_client& cl, const std::string& run_id,
                 double seconds, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  json last;
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      if (auto s = cl.status(run_id, 1000)) {
        last = *s;
        if (done(last))
          return last;
      }
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // status polling pace
  }
  return last;
}

/// The lines of an index.jsonl (a decoder's or a collect folder's) by name; `repeated`
/// gets each name indexed more than once.
inline std::map<std::string, json> read_index(const std::string& path,
                                              std::vector<std::string>& repeated) {
  std::map<std::string, json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = json::parse(line);
    const std::string name = j["name"].get<std::string>();
    if (out.count(name))
      repeated.push_back(name);
    out[name] = j;
  }
  return out;
}

/// The ident (32 raw bytes) a status job's record says, per the contract's version 2: the
/// lines made from its prompt_sha256, negative_prompt_sha256, workflow, model, params and
/// input digests (their names in byte order, as std::map keeps them).
inline std::string status_ident(const json& j) {
  auto str = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  std::string t = "prompt=" + str("prompt_sha256") + "\n";
  t += "negative_prompt=" + str("negative_prompt_sha256") + "\n";
  t += "workflow=" + str("workflow") + "\n";
  t += "model=" + str("model") + "\n";
  std::map<std::string, std::string> params, inputs;
  if (j.contains("params"))
    for (auto& [n, v] : j["params"].items())
      params[n] = v.is_string() ? v.get<std::string>() : v.dump();
  if (j.contains("inputs"))
    for (auto& [n, v] : j["inputs"].items())
      inputs[n] = v.is_string() ? v.get<std::string>() : std::string();
  for (auto& [n, v] : params)
    t += "param." + n + "=" + v + "\n";
  for (auto& [n, v] : inputs)
    t += "input." + n + "=" + v + "\n";
  unsigned char d[32];
  SHA256(reinterpret_cast<const unsigned char*>(t.data()), t.size(), d);
  return std::string(reinterpret_cast<const char*>(d), 32);
}

/// Checks one job of a status JSON against the sim contract; "" when it holds. `version` 1:
/// the latent without the ident (what the exec tests' sampler script writes).
inline std::string contract_problem(const json& j, int version = 2) {
  auto seed = j["seed"].get<uint64_t>();
  auto w = j["width"].get<uint32_t>();
  auto h = j["height"].get<uint32_t>();
  auto s = j["seconds"].get<uint32_t>();
  if (j["state"] != "succeeded")
    return "state " + j["state"].get<std::string>();
  auto bytes = contract::reference_latent_bytes(w, h, s);
  if (j["latent_bytes"].get<uint64_t>() != bytes)
    return "latent_bytes " + std::to_string(j["latent_bytes"].get<uint64_t>());
  auto sha = version == 1 ? contract::latent_sha256_v1(seed, w, h, s, bytes)
                          : contract::latent_sha256(seed, w, h, s, bytes, status_ident(j));
  if (j["latent_sha256"] != sha)
    return "latent_sha256 " + j["latent_sha256"].dump() + " != " + sha;
  auto out = j["output"].get<std::string>();
  if (out.empty() || out[0] != '/')
    return "output is not an absolute path: " + out;
  if (read_file(out) != contract::video_file(sha, seed, w, h, s))
    return "output file " + out + " does not read as the contract says";
  return "";
}

/// How many times each job of `run_id` finished `stage` ("sampled" | "decoded"), from the
/// work ledgers of the given data directories.
inline std::map<int, int> ledger_counts(const std::vector<std::string>& data_dirs,
                                        const std::string& run_id, const std::string& stage) {
  std::map<int, int> out;
  for (auto& d : data_dirs) {
    std::istringstream in(read_file(d + "/ledger.log"));
    std::string what, run;
    int idx;
    std::string rest;
    while (in >> what >> run >> idx && std::getline(in, rest))
      if (what == stage && run == run_id)
        ++out[idx];
  }
  return out;
}

} // namespace testing_support
