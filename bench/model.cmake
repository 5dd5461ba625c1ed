# Forward + backward throughput of the Transformer on the CPU backend (bench/RESULTS.md, "Model (CPU)").
add_executable(psformer_model_bench model_bench.cc)
target_link_libraries(psformer_model_bench PRIVATE psformer_model psformer_common)
set_target_properties(psformer_model_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
