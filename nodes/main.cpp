#include "nodes/cli.hpp"

int main(int argc, char** argv) { return vidline::nodes::cli_main(argc, argv); }
