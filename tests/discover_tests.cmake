# Run after a test executable is built (cmake -P): lists its GoogleTest
# cases and writes the ctest file that registers them.
#
#   -D EXECUTABLE=<test program>  -D CTEST_FILE=<file to write>
#   -D LABELS=<a,b>  -D TIMEOUT=<seconds>  -D PER_CASE=<ON|OFF>
#
# PER_CASE=OFF registers one ctest test per test suite (ctest -R <Suite>),
# run as `<program> --gtest_filter=<Suite>.*`: every process pays LibTorch's
# start (about 0.7 s of operator registration), and a suite's cases share
# what its SetUpTestSuite prepares. PER_CASE=ON registers each case
# (<Suite>.<Case>), for programs whose cases each take seconds, so that
# ctest -j spreads them over the cores.
#
# A test whose cases were all skipped (GTEST_SKIP: a CUDA case without a
# GPU) is reported as skipped: the tests' main() exits with 77 then
# (tests/test_main.cpp).
cmake_minimum_required(VERSION 3.18)
string(REPLACE "," ";" LABELS "${LABELS}")

execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE status
                TIMEOUT 120)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${status}): ${errors}")
endif()

string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  # "Suite.", "Prefix/Suite.  # TypeParam = ...", "  Case", "  Case/0  # GetParam() = ..."
  string(REGEX REPLACE " *#.*" "" line "${line}")
  if(line MATCHES "^([^ ].*)\\.$")
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set(cases_${suite} "")
  elseif(line MATCHES "^  ([^ ]+)$" AND suite)
    list(APPEND cases_${suite} "${CMAKE_MATCH_1}")
  endif()
endforeach()

set(script "")
foreach(suite IN LISTS suites)
  if(PER_CASE)
    set(names "")
    foreach(case IN LISTS cases_${suite})
      list(APPEND names "${suite}.${case}")
    endforeach()
  else()
    set(names "${suite}.*")
  endif()
  foreach(filter IN LISTS names)
    string(REGEX REPLACE "\\.\\*$" "" name "${filter}")
    string(APPEND script
           "add_test([==[${name}]==] [==[${EXECUTABLE}]==] [==[--gtest_filter=${filter}]==])\n"
           "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${LABELS}]==] "
           "TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77)\n")
  endforeach()
endforeach()
file(WRITE "${CTEST_FILE}" "${script}")
