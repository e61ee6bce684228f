#pragma once
/// The review vocabulary: a reviewer's verdict on one take (`POST /v1/runs/{id}/jobs/{i}/review`,
/// the dashboard's review cards) and the coordinator's answer; the verdict carried to the
/// run index on the host that holds the video, and that host's answer. Plain structs, as in
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

/// coordinator -> the decoder that made a job's video, on its host: record the verdict in
/// the run index beside the video (docs/shots.md, "Outputs and the run index"). Journaled
/// before it is sent, and sent again (on the decoder's status reports, at most every
/// order_resend_s) until verdict_indexed answers this revision: a host down when the
/// verdict was given gets it when it is back, a coordinator restarted sends it again.
struct verdict_index {
  static constexpr const char* wire_name = "verdict_index";
  std::string decoder;
  std::string run_id;
  uint32_t index = 0;
  std::string output;          ///< the video's path on the decoder's host
  std::string output_sha256;
  std::string verdict;         ///< "accepted" | "rejected"
  double at_unix = 0;          ///< when it was given (the coordinator's wall clock)
  int64_t take_index = -1;     ///< the take its reject added, -1 = none
  /// 1 for the take's first verdict, one more for each change: a line of a lower revision
  /// than the index holds is not written (a resend overtaken by a later verdict).
  uint32_t revision = 0;
  VIDLINE_MSGPACK_MAP(decoder, run_id, index, output, output_sha256, verdict, at_unix,
                     take_index, revision)
};

/// What became of a verdict_index.
namespace verdict_outcome {
inline constexpr const char* indexed = "indexed";  ///< the index holds it (now, or before)
/// The run index there holds no line of that video (one reused from another run's
/// output, or removed since): nothing to add; not asked again.
inline constexpr const char* no_line = "no_line";
inline constexpr const char* error = "error";      ///< not written (I/O): asked again
/// Refused as it came (a name not safe, a video outside the run's output directory, a
/// verdict not one of the two): `error` says why; not asked again.
inline constexpr const char* refused = "refused";
} // namespace verdict_outcome

/// decoder -> coordinator: the answer to a verdict_index.
struct verdict_indexed {
  static constexpr const char* wire_name = "verdict_indexed";
  std::string decoder;
  std::string host;
  std::string run_id;
  uint32_t index = 0;
  uint32_t revision = 0;       ///< of the verdict_index answered
  std::string outcome;         ///< verdict_outcome
  std::string error;
  VIDLINE_MSGPACK_MAP(decoder, host, run_id, index, revision, outcome, error)
};

} // namespace vidline::msg
