# The CUDA backend: every operator against the CPU backend, the whole model's loss and
# gradients, and 20 training steps; the copies of gradient ranges on a copy stream into pinned
# host memory (cuda_range_downloader_test, not yet run on a GPU); then `psformer train` with a
# GPU worker and `translate --gpu` through the binary. Labelled gpu; each test skips with "no CUDA
# device: ..." where no GPU is present, so the suite passes on machines with the toolkit but no
# device.
if(PSFORMER_HAVE_CUDA)
  psformer_test(cuda_backend_test gpu SOURCES cuda_backend_test.cc
                LIBS psformer_cuda_backend psformer_model psformer_common)
  psformer_test(cuda_model_test gpu SOURCES cuda_model_test.cc
                LIBS psformer_cuda_backend psformer_model psformer_common)
  psformer_test(gpu_training_test gpu SOURCES gpu_training_test.cc
                LIBS psformer_cuda_backend psformer_model psformer_common)
  psformer_test(cuda_range_downloader_test gpu SOURCES cuda_range_downloader_test.cc
                LIBS psformer_cuda_backend psformer_model psformer_common)
endif()

# The CUDA backend as a library of its own, on any machine: the binary starts without CUDA's
# libraries, loads the backend when asked and names a broken one (linked with psformer_model
# only for its PSFORMER_HAVE_CUDA).
psformer_test(cuda_library_test integration SOURCES cuda_library_test.cc LIBS psformer_model psformer_common)
