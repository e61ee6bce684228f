#pragma once
/// CURVE key pairs and key files for node-to-node links: made by `vidline keygen`
/// (nodes/verbs/keygen.cpp), read by the node for its bus and by the command line for its
/// client, one library for all three.
///
/// A host's pair lies in two files of one directory: `<HOST>.key`, the secret key, mode
/// 0600, and `<HOST>.pub`, the public key that goes into every other host's config. Each
/// holds one Z85 key (40 characters) and a newline, nothing else, so a public key can be
/// pasted as it is.

#include <string>

#include "config/config.hpp"
#include "nodes/bus/bus.hpp"

namespace vidline::nodes::bus {

/// How a client authenticates to a node: plaintext (loopback only), or CURVE with the
/// node's public key and a key pair the node lists (the CLI uses a host's pair:
/// docs/security.md, "The command line").
struct client_security {
  bool plaintext = true;
  std::string server_public_z85;  ///< the node's public key
  std::string public_z85;         ///< this client's pair
  std::string secret_z85;
};

/// A CURVE key pair, Z85-encoded (40 characters each).
struct curve_keypair {
  std::string public_z85;
  std::string secret_z85;
};

/// A fresh pair from libzmq (zmq_curve_keypair). Throws std::runtime_error when libzmq
/// was built without CURVE.
curve_keypair make_curve_keypair();

/// Where write_curve_keypair put a pair.
struct keygen_result {
  std::string secret_path;  ///< <dir>/<host>.key
  std::string public_path;  ///< <dir>/<host>.pub
  std::string public_z85;
};

/// Makes a pair and writes it durably to `<dir>/<host>.key` (0600, whatever the umask)
/// and `<dir>/<host>.pub` (0644), creating `dir` (0700) when missing. Refuses, changing
/// nothing, when `host` is not a plain host name or either file exists and `overwrite`
/// is false: a new pair revokes the old one, which must not happen by accident.
/// Throws std::invalid_argument (bad name, files exist) or std::runtime_error (I/O).
keygen_result write_curve_keypair(const std::string& dir, const std::string& host,
                                  bool overwrite = false);

/// Whether `s` is a Z85 CURVE key: 40 characters of the Z85 alphabet.
bool is_z85_key(const std::string& s);

/// The key in a `.pub` file. Throws std::runtime_error naming the file when it holds
/// anything but one Z85 key (and an optional newline).
std::string read_public_key(const std::string& path);

/// The key in a `.key` file, refused (std::runtime_error) unless the file is a regular
/// file, not a symlink, that neither group nor others may read or write.
std::string read_secret_key(const std::string& path);

/// The public key of a secret key (both Z85). Throws std::runtime_error if not a key.
std::string public_of_secret(const std::string& secret_z85);

/// What host `host`'s bus needs to authenticate its links: plaintext when the config says
/// so, else its secret key file (read_secret_key), which must match its public_key in the
/// config, and every host's public key. Throws std::runtime_error naming the file.
bus_security bus_security_for(const config::cluster& c, const std::string& host);

/// How the command line authenticates to host `node`: plaintext when the config says so,
/// else with the key pair of the first host of the config whose secret key file it can
/// read (`node` first, then the others in order), so the CLI runs as the nodes' user on
/// any host of the cluster. Throws std::runtime_error listing what it tried.
client_security client_security_for(const config::cluster& c, const std::string& node);

} // namespace vidline::nodes::bus
