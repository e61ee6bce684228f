#pragma once
/// The GPU vocabulary: one reading of a card, a node's report of its cards to the
/// coordinator, and the drain requests of `vidline drain` / `undrain`. Plain structs, as
/// in messages.hpp (same rules: fields only added at the end, packed as msgpack maps), in
/// a header of their own so only the files that use them include them.
///
/// A number a card does not report (no such sensor, an older driver, a symbol its NVML
/// lacks) is -1; the reader never invents one.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/messages.hpp"

namespace vidline::msg {

/// A process holding memory on a card.
struct gpu_process {
  uint32_t pid = 0;
  double memory_mib = -1;
  std::string name;          ///< its command name where the node can read it ("" = unknown)
  VIDLINE_MSGPACK_MAP(pid, memory_mib, name)
};

/// One Xid code a card raised since its node started (NVIDIA's driver error events).
struct gpu_xid {
  int32_t code = 0;
  int64_t count = 0;
  double last_unix_s = 0;    ///< when the node last saw it (its wall clock)
  VIDLINE_MSGPACK_MAP(code, count, last_unix_s)
};

/// One reading of one GPU. `source`: "nvml", "amdgpu" or "unknown" (neither answered:
/// every number is -1).
struct gpu_sample {
  int32_t index = 0;               ///< device index as the vendor's runtime numbers it
  std::string id;                  ///< the config's gpu id ("" = a card the config does not name)
  std::string source = "unknown";
  std::string name;                ///< the card's model as its driver names it
  std::string uuid;
  double unix_s = 0;               ///< when it was read (the node's wall clock)
  double temperature_c = -1;       ///< the GPU (edge) temperature
  double memory_temperature_c = -1;
  double slowdown_c = -1;          ///< the driver's slowdown threshold
  double power_w = -1;
  double energy_j = -1;            ///< the card's energy counter since its driver loaded
  double utilization = -1;         ///< 0-100 %
  double memory_used_mib = -1;
  double memory_total_mib = -1;
  double sm_clock_mhz = -1;
  double memory_clock_mhz = -1;
  int64_t throttle_reasons = -1;   ///< NVML's bit mask (0 = none)
  int64_t ecc_uncorrected = -1;    ///< uncorrectable ECC errors (volatile: since boot)
  int64_t ecc_corrected = -1;
  int32_t pcie_gen = -1;
  int32_t pcie_width = -1;
  bool lost = false;               ///< fell off the bus / the driver says the card is lost
  std::vector<gpu_process> processes;  ///< compute processes holding memory on it
  /// The health rule's verdict on the reporting node (actors/gpu/health.hpp): "ok",
  /// "sick" (drain its pools and decoders) or "unknown" (no telemetry).
  std::string health = "unknown";
  std::string health_reason;
  // Xid events (NVML's critical-error events), counted by the node since it started. An
  // older node sends none of these: unknown, as on a driver without events.
  int64_t xid_events = -1;         ///< Xid events seen (-1: unknown: no NVML event support)
  int32_t xid_last = -1;           ///< the newest one's code (-1: none yet, or unknown)
  double xid_last_unix_s = -1;     ///< when the node saw it (its wall clock; -1: none)
  std::vector<gpu_xid> xids;       ///< every code seen, ascending by code
  VIDLINE_MSGPACK_MAP(index, id, source, name, uuid, unix_s, temperature_c,
                      memory_temperature_c, slowdown_c, power_w, energy_j, utilization,
                      memory_used_mib, memory_total_mib, sm_clock_mhz, memory_clock_mhz,
                      throttle_reasons, ecc_uncorrected, ecc_corrected, pcie_gen, pcie_width,
                      lost, processes, health, health_reason, xid_events, xid_last,
                      xid_last_unix_s, xids)
};

/// A node's cards, to the coordinator every gpu_sample_interval_ms (level-triggered: the
/// newest report is the truth; a lost one costs one interval).
struct gpu_report {
  static constexpr const char* wire_name = "gpu_report";
  std::string host;
  uint64_t seq = 0;
  std::vector<gpu_sample> gpus;
  VIDLINE_MSGPACK_MAP(host, seq, gpus)
};

/// `vidline drain` / `undrain`: take a pool, a decoder or every pool and decoder of a host
/// out of dispatch (its running stage finishes), or put it back.
struct drain_request {
  static constexpr const char* wire_name = "drain_request";
  std::string kind;      ///< "pool" | "decoder" | "host"
  std::string name;
  bool drain = true;     ///< false = undrain
  std::string reason;
  VIDLINE_MSGPACK_MAP(kind, name, drain, reason)
};

struct drain_reply {
  static constexpr const char* wire_name = "drain_reply";
  std::vector<std::string> targets;  ///< "pool:NAME" / "decoder:NAME" it changed or confirmed
  std::string error;
  std::string code;                  ///< "not_found" | "invalid" with an error
  VIDLINE_MSGPACK_MAP(targets, error, code)
};

} // namespace vidline::msg
