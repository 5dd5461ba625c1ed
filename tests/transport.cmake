# Transport security and transport faults: CURVE keys and the ZAP handler at the
# parameter server, the fault-injecting Van, and the wire fuzzer run briefly.
psformer_test(faulty_van_test unit SOURCES faulty_van_test.cc LIBS psformer_common)
psformer_test(pserver_auth_test integration SOURCES pserver_auth_test.cc LIBS psformer_pserver psformer_common)

# CI runs the wire fuzzer briefly: scripts/fuzz builds it with clang in its own directory (the
# first run takes a few minutes for that) and fuzzes for 25 s; a crash fails the test and leaves
# its input under fuzz-build/fuzz/artifacts/. Longer by hand: scripts/fuzz 3600.
# Needs clang++ and its libFuzzer runtime (Debian: clang-14 and libclang-rt-14-dev).
find_program(PSFORMER_FUZZ_CLANGXX NAMES clang++-14 clang++)
set(PSFORMER_FUZZ_RUNTIME "")
if(PSFORMER_FUZZ_CLANGXX)
  execute_process(COMMAND ${PSFORMER_FUZZ_CLANGXX} -print-file-name=libclang_rt.fuzzer-${CMAKE_SYSTEM_PROCESSOR}.a
                  OUTPUT_VARIABLE PSFORMER_FUZZ_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(PSFORMER_FUZZ)
  # This is the fuzz build itself.
elseif(IS_ABSOLUTE "${PSFORMER_FUZZ_RUNTIME}" AND EXISTS "${PSFORMER_FUZZ_RUNTIME}")
  add_test(NAME wire_fuzz COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz 25)
  set_tests_properties(wire_fuzz PROPERTIES LABELS unit TIMEOUT 1200 RESOURCE_LOCK fuzz_build
    ENVIRONMENT "PSFORMER_FUZZ_BUILD_DIR=${CMAKE_BINARY_DIR}/fuzz-build;CLANG=${PSFORMER_FUZZ_CLANGXX}")
  # The readers of text files (metrics.jsonl, supervisor logs, hostfiles), briefly, from their seeds.
  # And a live server fed sequences of messages.
  foreach(reader metrics_line supervisor_log hostfile live_server)
    add_test(NAME ${reader}_fuzz COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz --target ${reader} 10)
    set_tests_properties(${reader}_fuzz PROPERTIES LABELS unit TIMEOUT 1200 RESOURCE_LOCK fuzz_build
      ENVIRONMENT "PSFORMER_FUZZ_BUILD_DIR=${CMAKE_BINARY_DIR}/fuzz-build;CLANG=${PSFORMER_FUZZ_CLANGXX}")
  endforeach()
else()
  message(STATUS "psformer: no clang++ with libFuzzer (clang-14, libclang-rt-14-dev); the wire_fuzz test is left out")
endif()
psformer_test(pserver_retry_test integration SOURCES pserver_retry_test.cc
  LIBS psformer_pserver psformer_common)
# When the client sends again (Resender): the policy on a set clock, and a push and a pull through
# a slow link on loopback (tests/slow_link.h) that outlast retry_ms and still cross it once.
psformer_test(resend_test integration SOURCES resend_test.cc LIBS psformer_pserver psformer_common)
# Several connections per peer (cluster.streams): payloads spread, answers on their connection,
# CURVE on each, and a BSP job over four streams bitwise equal to one.
psformer_test(streams_test integration SOURCES streams_test.cc LIBS psformer_pserver psformer_common)
# Holding back by rank (cluster.send_window): through a slow link, held messages leave lowest
# rank first and a first-ranked one overtakes them; answers are not held; closing hands them over.
psformer_test(send_window_test integration SOURCES send_window_test.cc LIBS psformer_common)
psformer_test(payload_sealer_test unit SOURCES payload_sealer_test.cc LIBS psformer_common)
# The pull's last stage on its own thread (pserver/client/pull_landing.h): pieces checked in their
# copy into place, outcomes in order, a damaged piece told, bf16 widened or kept.
psformer_test(pull_landing_test unit SOURCES pull_landing_test.cc LIBS psformer_pserver psformer_common)
psformer_test(zmq_slices_test integration SOURCES zmq_slices_test.cc LIBS psformer_common)
# cluster.sums_first: the host link board a host aggregator publishes its sums on their way in,
# and a server's answers to other hosts waiting on it (never for long, never without a payload).
psformer_test(host_link_board_test integration SOURCES host_link_board_test.cc LIBS psformer_common)
