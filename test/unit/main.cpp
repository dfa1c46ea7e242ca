//===- main.cpp - Catch2 entry point of dhs-unittests ---------------------===//

#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
