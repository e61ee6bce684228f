#pragma once
/// Runs a blocking call (a backend stage) on a thread of its own and sends its result to
/// the actor that asked, so no backend ever blocks the actor scheduler. An exception
/// escaping the call becomes `on_error(what)`'s result instead of a silent loss. `Self` is
/// the asking actor's typed self pointer: the result's type must be in its contract.

#include <exception>
#include <string>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/spawn_options.hpp>

namespace vidline::actors {

template <class Self, class Call, class OnError>
void run_on_worker(Self* self, Call call, OnError on_error) {
  auto requester = caf::actor_cast<caf::actor>(self);
  self->template spawn<caf::detached>(
    [requester, call = std::move(call), on_error = std::move(on_error)](caf::blocking_actor* w) mutable {
      try {
        w->send(requester, call());
      } catch (const std::exception& e) {
        w->send(requester, on_error(std::string(e.what())));
      } catch (...) {
        w->send(requester, on_error(std::string("unknown exception")));
      }
    });
}

} // namespace vidline::actors
