#pragma once
/// The GPU messages (gpu.hpp) carried as they are between actors of one node, as
/// actor_types.hpp does for the rest: included only where they are handled.

#include <caf/allowed_unsafe_message_type.hpp>

#include "messages/actor_types.hpp"
#include "messages/gpu.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::gpu_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::client_call<vidline::msg::drain_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::drain_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::drain_reply)
