# Same-host shared memory: the ShmVan and its segments (single process, ipc:// in a temp dir).
psformer_test(shm_van_test integration SOURCES shm_van_test.cc LIBS psformer_pserver psformer_common)
