# Parameter servers over ZeroMQ (issue 5): framing and validation, transport, checkpoints,
# servers with their clients on loopback.
psformer_test(wire_test unit SOURCES wire_test.cc LIBS psformer_common)
psformer_test(checkpoint_test unit SOURCES checkpoint_test.cc LIBS psformer_common)
psformer_test(transport_test integration SOURCES transport_test.cc LIBS psformer_common)
