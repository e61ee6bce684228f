#include "nodes/node.hpp"
#include "nodes/verbs/cli.hpp"

int main(int argc, char** argv) {
  return vidline::nodes::verbs::cli_main(argc, argv, &vidline::nodes::run_node);
}
