# Transport security and transport faults (issue 7): CURVE keys and the ZAP handler at the
# parameter server, the fault-injecting Van, and the wire fuzzer run briefly.
psformer_test(faulty_van_test unit SOURCES faulty_van_test.cc LIBS psformer_common)
psformer_test(pserver_auth_test integration SOURCES pserver_auth_test.cc LIBS psformer_common)

# CI runs the wire fuzzer briefly: scripts/fuzz builds it with clang in its own directory (the
# first run takes a few minutes for that) and fuzzes for 25 s; a crash fails the test and leaves
# its input under fuzz-build/fuzz/artifacts/. Longer by hand: scripts/fuzz 3600.
find_program(PSFORMER_FUZZ_CLANGXX NAMES clang++-14 clang++)
if(PSFORMER_FUZZ_CLANGXX AND NOT PSFORMER_FUZZ)
  add_test(NAME wire_fuzz COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz 25)
  set_tests_properties(wire_fuzz PROPERTIES LABELS unit TIMEOUT 1200
    ENVIRONMENT "PSFORMER_FUZZ_BUILD_DIR=${CMAKE_BINARY_DIR}/fuzz-build;CLANG=${PSFORMER_FUZZ_CLANGXX}")
elseif(NOT PSFORMER_FUZZ)
  message(STATUS "psformer: no clang++ found; the wire_fuzz test is left out")
endif()
psformer_test(pserver_retry_test integration SOURCES pserver_retry_test.cc
  LIBS psformer_pserver psformer_worker psformer_common)
