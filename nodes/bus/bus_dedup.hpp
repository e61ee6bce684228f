#pragma once
/// Duplicate suppression by (path, sender, id): the bus drops a message whose envelope id
/// it has already taken from that sender over that path.
///
/// Per key it keeps the highest id seen and a bitmap of the `window` ids below it, so ids
/// may arrive out of order by up to `window` (a peer's messages come over two connections:
/// its DEALER to our ROUTER and its ROUTER back to our DEALER). An id older than the window
/// is dropped too: it cannot be told from a duplicate. Keys are evicted least recently
/// used beyond `max_keys`, which bounds memory against clients that come and go; an
/// evicted key's next message is taken as new.

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

namespace vidline::nodes::bus {

/// The duplicate filter; not thread-safe (the bus's I/O thread owns it).
class bus_dedup {
public:
  /// `window`: ids remembered below the highest, rounded up to a multiple of 64.
  /// `max_keys`: (path, sender) keys remembered.
  bus_dedup(std::size_t window, std::size_t max_keys);

  /// True the first time `id` is offered for (path, sender); false for a repeat or an id
  /// more than `window` below the highest seen.
  bool accept(const std::string& path, const std::string& sender, uint64_t id);

  /// Forgets every key of `sender` (it restarted: its ids begin anew).
  void forget_sender(const std::string& sender);

  std::size_t keys() const { return entries_.size(); }

private:
  struct entry {
    std::string sender;
    uint64_t high = 0;
    std::vector<uint64_t> seen;  ///< bit (id % window) set when id in (high - window, high] was taken
    std::list<std::string>::iterator lru;
  };

  bool test_and_set(entry& e, uint64_t id);

  std::size_t window_;
  std::size_t max_keys_;
  std::unordered_map<std::string, entry> entries_;
  std::list<std::string> lru_;  ///< most recently used first
};

} // namespace vidline::nodes::bus
