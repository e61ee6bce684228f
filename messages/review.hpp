#pragma once
/// The review vocabulary: a reviewer's verdict on one take (`POST /v1/runs/{id}/jobs/{i}/review`,
/// the dashboard's review cards) and the coordinator's answer. Plain structs, as in
/// messages.hpp (same rules: fields only added at the end, packed as msgpack maps), in a
/// header of their own so only the files that use them include them.

#include <cstdint>
#include <string>

#include "messages/messages.hpp"

namespace vidline::msg {

/// client -> coordinator: accept or reject job `index`'s video; a reject may ask for
/// another take of its shot (the next seed), added to the run as jobs added are.
struct review_take {
  static constexpr const char* wire_name = "review_take";
  std::string run_id;
  uint32_t index = 0;
  std::string verdict;        ///< "accept" | "reject"
  bool another_take = false;  ///< with "reject": add a take of the shot with the next seed
  VIDLINE_MSGPACK_MAP(run_id, index, verdict, another_take)
};

/// coordinator -> client.
struct review_reply {
  static constexpr const char* wire_name = "review_reply";
  std::string run_id;
  uint32_t index = 0;
  std::string verdict;        ///< as recorded: "accepted" | "rejected"
  int64_t take_index = -1;    ///< the take the reject added (or added before), -1 = none
  uint64_t take_seed = 0;
  std::string state;          ///< the run's state afterwards
  std::string error;
  std::string code;           ///< with an error: "no_such_run", "not_reviewable", "invalid"
  VIDLINE_MSGPACK_MAP(run_id, index, verdict, take_index, take_seed, state, error, code)
};

} // namespace vidline::msg
