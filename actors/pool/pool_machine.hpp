#pragma once
/// A pool's order handling: a pure state machine. One job at a time; conditioning first
/// (from the host's encoder), then sampling. Orders are deduplicated by attempt id and
/// results stay in every status report until the coordinator acks them.
///
///   idle --order--> conditioning --conditioned--> sampling --sampled--> idle (+ result)
///                        |                                      
///                        +--- conditioning failed ---> idle (+ transient result)

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/messages.hpp"

namespace vidline::pooling {

enum class phase { idle, conditioning, sampling };

struct state {
  std::string pool;
  std::string host;
  uint64_t epoch = 0;
  bool accepting = true;
  phase at = phase::idle;
  std::optional<msg::sample_order> current;
  double conditioning_s = 0;
  std::vector<msg::sample_result> unacked;
  std::deque<uint64_t> recent_done;   ///< attempts finished lately (dedups resent orders)
  uint64_t refused_orders = 0;
  uint64_t status_seq = 0;

  /// The next status report (each one numbered, so the coordinator can drop stale ones).
  msg::pool_status status();
};

struct ev_order { msg::sample_order order; };
struct ev_conditioned { uint64_t attempt = 0; bool ok = false; std::string path;
                        double encode_s = 0; std::string error; };
struct ev_sampled { uint64_t attempt = 0; std::string outcome; std::string error;
                    std::string sha256; uint64_t bytes = 0; double elapsed_s = 0;
                    bool cold = false; };
struct ev_ack { uint64_t attempt = 0; };
using event = std::variant<ev_order, ev_conditioned, ev_sampled, ev_ack>;

struct fx_condition { msg::sample_order order; };
struct fx_sample { msg::sample_order order; std::string conditioning_path; };
struct fx_report {};
struct fx_log { int level = 2; std::string text; };
using effect = std::variant<fx_condition, fx_sample, fx_report, fx_log>;

std::vector<effect> step(state& s, const event& e, double now);

} // namespace vidline::pooling
