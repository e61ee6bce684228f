#pragma once
/// The review messages (review.hpp) carried as they are between actors of one node, as
/// actor_types.hpp does for the rest: included only where they are handled.

#include <caf/allowed_unsafe_message_type.hpp>

#include "messages/actor_types.hpp"
#include "messages/review.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::client_call<vidline::msg::review_take>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::verdict_index)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::verdict_indexed)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::review_take)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vidline::msg::review_reply)
