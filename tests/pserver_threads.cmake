# Servers' passes split across threads (pserver/server/shard_optimizer.h): bitwise the same as one thread.
psformer_test(pserver_threads_test integration SOURCES pserver_threads_test.cc LIBS psformer_pserver psformer_common)
