# Transport security and transport faults (issue 7): CURVE keys and the ZAP handler at the
# parameter server, the fault-injecting Van, and the wire fuzzer run briefly.
psformer_test(faulty_van_test unit SOURCES faulty_van_test.cc LIBS psformer_common)
psformer_test(pserver_auth_test integration SOURCES pserver_auth_test.cc LIBS psformer_common)
