# The worker's data path (worker/datapath/): its stages on their threads, against servers on loopback;
# and the gradient's way off the device (transformer_step_test: bf16 rounded where it was computed).
psformer_test(datapath_test integration SOURCES datapath_test.cc LIBS psformer_worker psformer_pserver psformer_common)
psformer_test(transformer_step_test unit SOURCES transformer_step_test.cc LIBS psformer_worker psformer_common)
# The step timeline (common/trace.h): its window, and a traced job of every role.
psformer_test(trace_test integration SOURCES trace_test.cc LIBS psformer_common)
# Each role process's share of its host's cores for passes over payloads (common/role_threads.h).
psformer_test(host_share_test integration SOURCES host_share_test.cc LIBS psformer_common)
