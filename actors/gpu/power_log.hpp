#pragma once
/// The power each card drew and the energy of the stages that ran on it: a pure machine,
/// times on one clock given by the caller (the coordinator's run clock), no I/O.
///
/// A stage's times are known only when its result arrives, after the readings that cover
/// it, so readings are kept (for `keep_s`) and a stage's energy is integrated afterwards:
///   - power is held from one reading to the next (zero-order hold), for at most
///     `max_hold_s`: a card that stopped reporting counts nothing after that;
///   - while n stages hold a card each gets 1/n of its power (a card shared by two owners
///     at once is split by time): those recorded so far, and those the caller says run
///     now (their end not known yet; when they are recorded later, they see this one);
///   - a stage on several cards gets the sum over its cards;
///   - a stage no reading covers has no known energy (-1), never 0.

#include <map>
#include <string>
#include <vector>

namespace vidline::actors::gpu {

class power_log {
public:
  explicit power_log(double max_hold_s = 60, double keep_s = 3 * 3600)
      : max_hold_s_(max_hold_s), keep_s_(keep_s) {}

  /// A reading of `card` at `t` (watts; < 0 = unknown: nothing counts until the next).
  /// Readings of a card come in time order; one not after the card's last is ignored.
  void reading(const std::string& card, double t, double power_w);

  /// Another stage running now on `card`, since `since`.
  struct running {
    std::string card;
    double since = 0;
  };

  /// The joules of stage `owner`, which held `cards` over [a, b], shared with the stages
  /// recorded and those `now_running`; records the hold (a stage recorded again replaces
  /// its hold). -1 when no reading of its cards covers any of it.
  double stage(const std::string& owner, const std::vector<std::string>& cards, double a,
               double b, const std::vector<running>& now_running = {});

  /// Joules `card` drew over [a, b], whoever held it; -1 when no reading covers any of it.
  double card_joules(const std::string& card, double a, double b) const;

  /// Drops readings (in batches of a few hundred) and holds older than `keep_s` before
  /// `now`.
  void forget(double now);

  /// Readings kept of `card` (for tests and the metrics).
  std::size_t readings(const std::string& card) const;

private:
  struct hold {
    std::string owner;
    double a = 0, b = 0;
  };
  struct card_log {
    std::vector<std::pair<double, double>> readings;  ///< (t, watts), in time order
    std::vector<hold> holds;
  };
  /// Joules of `c` over [a, b]; with `split`, each moment's power divided among the holds
  /// then and the stages running (the stage itself counted once: `self` is skipped among
  /// the holds); `covered` set when a reading covers some of it.
  double integrate(const card_log& c, const std::string& card, double a, double b,
                   const std::string& self, const std::vector<running>* split,
                   bool& covered) const;
  double max_hold_s_;
  double keep_s_;
  std::map<std::string, card_log> cards_;
};

} // namespace vidline::actors::gpu
