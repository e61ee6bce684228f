#pragma once
/// One name per card kind. A kind (the key a pool, encoder or decoder looks its timings up
/// by) is named after the card's model, as config::default_profile_key derives it: "Tesla
/// T10" x 8 is `t10x8`, "RX 7900 XTX" is `rx7900xtx`. So a config that leaves "profile" out
/// finds the kinds of the embedded reference profile, and a profile built from history
/// names them the same way.
///
/// Older profiles, configs and journals called some kinds otherwise (the reference profile
/// called the XTX `xtx`). They still load: every reader of a kind name (the config's
/// "profile" fields, a profile's kinds, the kinds a journal recorded) takes it through
/// current_kind(), and preflight names each old spelling it met (docs/profile.md, "Kinds").

#include <optional>
#include <string>
#include <vector>

namespace vidline::config::profile {

/// A kind's old name and the name it has now.
struct renamed_kind {
  const char* old_name;
  const char* name;
};

/// Every kind renamed, old name first: {"xtx", "rx7900xtx"}.
const std::vector<renamed_kind>& renamed_kinds();

/// `key` under its current name: a renamed kind's new name, also with a GPU count
/// ("xtx" -> "rx7900xtx", "xtxx4" -> "rx7900xtxx4"); any other key as it is.
std::string current_kind(const std::string& key);

/// The current name when `key` is an old one, else nullopt.
std::optional<std::string> renamed(const std::string& key);

} // namespace vidline::config::profile
