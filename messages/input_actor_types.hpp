#pragma once
/// The coordinator's input maker answering its actor (actors/coordinator/input_maker.hpp),
/// carried as it is inside one node as actor_types.hpp does for the rest: included only
/// where it is handled.

#include <cstdint>
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>

namespace vidline::msg {

/// An input of a waiting job made (or not: `error`) on the input maker's own thread.
struct input_made {
  std::string run_id;
  uint32_t index = 0;
  std::string name;
  std::string sha256;
  uint64_t bytes = 0;
  std::string error;
};

} // namespace vidline::msg

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::input_made)
