#include "tests/testing/multiprocess.h"

int main(int argc, char** argv) { return tessera::testing::TestMain(argc, argv); }
