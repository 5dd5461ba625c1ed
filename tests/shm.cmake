# Same-host shared memory: the ShmVan and its segments (single process, ipc:// in a temp dir).
psformer_test(shm_van_test integration SOURCES shm_van_test.cc LIBS psformer_pserver psformer_common)
# Whole jobs over shared memory, clean and with roles killed (compared bitwise with TCP), also
# inside a shared-memory copy or while a reply is read, restarts reattaching on new segments.
psformer_test(shm_job_test fault SOURCES shm_job_test.cc LIBS psformer_common)
