// Effects of one kind out of what a machine's step returned (a vector of any std::variant
// of effect kinds: the coordinator's, a pool's, a decoder's, the latent store's).
#pragma once

#include <cstddef>
#include <variant>
#include <vector>

namespace testing_support {

/// The effects of kind T among `fx`, in order.
template <class T, class Fx>
std::vector<T> all_of(const std::vector<Fx>& fx) {
  std::vector<T> out;
  for (auto& e : fx)
    if (auto* x = std::get_if<T>(&e))
      out.push_back(*x);
  return out;
}

/// The first effect of kind T among `fx`, or nullptr.
template <class T, class Fx>
const T* first_of(const std::vector<Fx>& fx) {
  for (auto& e : fx)
    if (auto* x = std::get_if<T>(&e))
      return x;
  return nullptr;
}

/// How many effects of kind T are among `fx`.
template <class T, class Fx>
int count_of(const std::vector<Fx>& fx) {
  int n = 0;
  for (auto& e : fx)
    n += std::holds_alternative<T>(e) ? 1 : 0;
  return n;
}

} // namespace testing_support
