#include "garden/cli/cli.h"

int main(int argc, char** argv) { return garden::run_main(argc, argv); }
