# Parameter servers over ZeroMQ: framing and validation, transport, checkpoints,
# servers with their clients on loopback.
psformer_test(wire_test unit SOURCES wire_test.cc piece_table_test.cc gradient_rows_test.cc LIBS psformer_pserver psformer_common)
psformer_test(pserver_policy_test unit SOURCES pserver_policy_test.cc LIBS psformer_pserver psformer_common)
psformer_test(checkpoint_test unit SOURCES checkpoint_test.cc LIBS psformer_common)
psformer_test(transport_test integration SOURCES transport_test.cc LIBS psformer_common)
psformer_test(pserver_test integration
  SOURCES pserver_bsp_test.cc pserver_validation_test.cc pserver_checkpoint_test.cc pserver_command_test.cc
    split_embedding_test.cc
  LIBS psformer_pserver psformer_common)
# Host summing: aggregators between a host group's workers and the servers.
psformer_test(host_summing_test integration SOURCES host_summing_test.cc aggregator_bounds_test.cc aggregator_shares_test.cc
  LIBS psformer_pserver psformer_common)
