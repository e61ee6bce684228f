#pragma once
/// The CAF side of the vocabulary: atoms and the structs actors exchange inside one node.
/// Structs cross process boundaries only as msgpack (messages.hpp); inside a node CAF
/// carries them as they are, so they are whitelisted rather than made CAF-serializable.

#include <cstdint>
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "messages/messages.hpp"

namespace vidline::msg {

/// A request that came from a command-line client: the body plus where to answer.
template <class T>
struct client_call {
  T body;
  std::string reply_to;     ///< the client's routing id on the node's ROUTER socket
  uint64_t correlation = 0; ///< the request's envelope id
};

/// A backend call finished on its worker thread (pool and encoder shells).
struct stage_done {
  uint64_t attempt = 0;
  std::string outcome;
  std::string error;
  std::string sha256;
  uint64_t bytes = 0;
  double elapsed_s = 0;
  bool cold = false;
  std::string product_path;  ///< where the product lies now (staged until its lease decides)
  std::string final_path;    ///< decoder: where it is published (= product_path when reused)
  std::string model;         ///< pool: the model the backend had loaded ("" unknown)
  std::string model_identity;
  std::string bad_checkpoint;  ///< pool: the order's resume checkpoint did not verify
};

/// A pool's sampler saved a checkpoint, now durable in the host's latent store (sent from
/// the stage's thread to the pool actor).
struct checkpoint_saved {
  uint64_t attempt = 0;
  checkpoint_ref c;
};

/// A host's latents actor to its pools: whether the host is within its latent budget.
struct latent_budget {
  bool accepting = true;
};

/// The data plane finished pulling a latent for a decoder.
struct fetch_done {
  uint64_t attempt = 0;
  std::string outcome;
  std::string error;
};

// Atoms: at most 10 characters; `caf::tick_atom` exists already.
using status_atom = caf::atom_constant<caf::atom("vl_status")>;
using tick_atom = caf::atom_constant<caf::atom("vl_tick")>;
using crash_atom = caf::atom_constant<caf::atom("vl_crash")>;

} // namespace vidline::msg

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::sample_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::sample_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::pool_status)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::result_ack)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::lease_grant)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::decode_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::decode_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::decoder_status)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::latent_holdings)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::latent_release)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::encode_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::encode_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::peer_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::shutdown_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::client_call<vidline::msg::submit_run>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::client_call<vidline::msg::status_query>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::client_call<vidline::msg::resume_run>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::client_call<vidline::msg::runs_query>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::client_call<vidline::msg::cancel_run>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::client_call<vidline::msg::submit_jobs>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::stage_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::checkpoint_saved)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::fetch_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::latent_budget)
// The same requests made inside the coordinator's process (CAF requests: the HTTP API),
// and their replies.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::submit_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::submit_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::status_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::status_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::resume_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::resume_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::runs_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::runs_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::cancel_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::cancel_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::submit_jobs)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::submit_jobs_reply)
