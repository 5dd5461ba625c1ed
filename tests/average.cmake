# Checkpoint averaging: psformer average against known shard files.
psformer_test(average_test integration SOURCES average_test.cc LIBS psformer_pserver psformer_common)
