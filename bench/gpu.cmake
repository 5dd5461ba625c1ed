# The GPU benchmark of the CUDA backend, built with it; run by bench/gpu/run_on_gpu.sh.
if(PSFORMER_HAVE_CUDA)
  add_executable(psformer_gpu_bench gpu/gpu_bench.cc)
  target_link_libraries(psformer_gpu_bench PRIVATE psformer_cuda_backend psformer_model psformer_data psformer_common)
  set_target_properties(psformer_gpu_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
