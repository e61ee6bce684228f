#pragma once
/// The coordinator's view of every host's cards: the newest gpu_report of each host, the
/// health events the scheduler gets from it, and the JSON `status @cluster`, `vidline gpus`
/// and GET /v1/gpus show. No CAF: the coordinator's shell calls it.

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/coordinator/scheduler.hpp"
#include "config/config.hpp"
#include "messages/gpu.hpp"

namespace vidline::actors::coordinator {

struct gpu_view {
  std::map<std::string, msg::gpu_report> latest;   ///< host -> its newest report
  std::map<std::string, double> received;          ///< host -> when it came (run clock)
};

/// A card's key in drains and health events: "host/<gpu id>" ("host/#<index>" for a card
/// the config does not name).
std::string gpu_key(const std::string& host, const msg::gpu_sample& g);

/// The config's users of each card of `host`: "pool:NAME" / "decoder:NAME", by gpu id.
std::map<std::string, std::vector<std::string>> gpu_users(const config::cluster& c,
                                                          const std::string& host);

/// Takes a report in (a stale one, by seq, is ignored: false) and gives the scheduler's
/// health events of its cards (those with a verdict).
bool take_report(gpu_view& v, const config::cluster& c, const msg::gpu_report& r, double now,
                 std::vector<ev_gpu_health>& events);

/// The power readings of a report's cards the config names (for the stages' energy).
ev_gpu_power power_readings(const msg::gpu_report& r);

/// Every card reported: one object per card (numbers a card does not report are null),
/// with its pools and decoders, its age, and whether they are drained.
nlohmann::json gpus_json(const gpu_view& v, const config::cluster& c, const state& s,
                         double now);

} // namespace vidline::actors::coordinator
