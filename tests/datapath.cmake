# The worker's data path (worker/datapath/): its stages on their threads, against servers on loopback.
psformer_test(datapath_test integration SOURCES datapath_test.cc LIBS psformer_worker psformer_pserver psformer_common)
