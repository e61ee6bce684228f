/// The bus's duplicate filter (bus_dedup.hpp).

#include "nodes/bus/bus_dedup.hpp"

#include <algorithm>
#include <stdexcept>

namespace vidline::nodes::bus {

namespace {
constexpr std::size_t word_bits = 64;
}

bus_dedup::bus_dedup(std::size_t window, std::size_t max_keys)
    : window_((window + word_bits - 1) / word_bits * word_bits), max_keys_(max_keys) {
  if (window_ == 0 || max_keys_ == 0)
    throw std::invalid_argument("bus_dedup: window and max_keys must be positive");
}

bool bus_dedup::accept(const std::string& path, const std::string& sender, uint64_t id) {
  std::string key;
  key.reserve(path.size() + 1 + sender.size());
  key.append(path).push_back('\0');
  key.append(sender);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_keys_) {
      entries_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(key);
    entry e;
    e.sender = sender;
    e.high = id;
    e.seen.assign(window_ / word_bits, 0);
    e.lru = lru_.begin();
    it = entries_.emplace(std::move(key), std::move(e)).first;
    test_and_set(it->second, id);
    return true;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return test_and_set(it->second, id);
}

bool bus_dedup::test_and_set(entry& e, uint64_t id) {
  auto bit = [&](uint64_t i) -> std::pair<uint64_t&, uint64_t> {
    const uint64_t slot = i % window_;
    return {e.seen[slot / word_bits], uint64_t{1} << (slot % word_bits)};
  };
  if (id > e.high) {
    // Slide the window up: ids between the old and the new high were never seen.
    if (id - e.high >= window_) {
      std::fill(e.seen.begin(), e.seen.end(), 0);
    } else {
      for (uint64_t i = e.high + 1; i < id; ++i) {
        auto [word, mask] = bit(i);
        word &= ~mask;
      }
    }
    e.high = id;
    auto [word, mask] = bit(id);
    word = (word & ~mask) | mask;
    return true;
  }
  if (e.high - id >= window_)
    return false;  // too old to tell from a duplicate
  auto [word, mask] = bit(id);
  if (word & mask)
    return false;
  word |= mask;
  return true;
}

void bus_dedup::forget_sender(const std::string& sender) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.sender == sender) {
      lru_.erase(it->second.lru);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

} // namespace vidline::nodes::bus
