# Emulated GPU workers (cluster.backend EMULATED): the stand-in itself, and whole jobs with it
# compared bitwise across server counts, launch modes and a killed worker.
psformer_test(emulated_gpu_test unit SOURCES emulated_gpu_test.cc LIBS psformer_worker psformer_common)
psformer_test(emulated_training_test integration SOURCES emulated_training_test.cc LIBS psformer_common)
